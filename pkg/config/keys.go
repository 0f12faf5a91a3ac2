package config

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// topFields are the top-level keys the plugin understands, each with its
// decoder; anything else is a warning, never an error, and never used.
func (c *NetConf) topFields() []field {
	return []field{
		{"cniVersion", plain(&c.CNIVersion)},
		{"cniVersions", ignore},
		{"name", plain(&c.Name)},
		{"type", plain(&c.Type)},
		{"capabilities", plain(&c.Capabilities)},
		{"ipam", c.decodeIPAM},
		// dns and args belong to their own decoders (the library's DNS
		// type, the IPAM plugin); prevResult is decoded after cniVersion.
		{"dns", plain(&c.DNS)},
		{"args", ignore},
		{"prevResult", ignore},
		{"runtimeConfig", object(c.runtimeFields)},
		{"cni.dev/valid-attachments", attachments(&c.PluginConf.ValidAttachments)},
		{"cni.dev/attachments", attachments(&c.LegacyAttachments)},
		{"mode", plain(&c.Mode)},
		{"devices", stringList(&c.Devices, maxConfList)},
		{"nodeAddresses", stringList(&c.NodeAddresses, maxNodeAddresses)},
		{"podSelection", plain(&c.PodSelection)},
		{"resourceNames", stringList(&c.ResourceNames, maxConfList)},
		{"draDrivers", stringList(&c.DRADrivers, maxConfList)},
		{"podResourcesSocket", plain(&c.PodResourcesSocket)},
		{"cdiDir", plain(&c.CDIDir)},
		{"kubeletUnreachable", plain(&c.KubeletUnreachable)},
		{"ifName", plain(&c.IfName)},
		{"sharedLink", object(c.sharedLinkFields)},
		{"smcr", object(c.smcrFields)},
		{"dataDir", plain(&c.DataDir)},
		{"logFile", plain(&c.LogFile)},
		{"logLevel", plain(&c.LogLevel)},
		{"deviceID", plain(&c.DeviceID)},
		{"dad", plain(&c.DAD)},
		{"reportIPs", plain(&c.ReportIPs)},
		{"podIPv6Block", plain(&c.PodIPv6Block)},
		{"podSoftRoCE", plain(&c.PodSoftRoCE)},
		{"drain", plain(&c.Drain)},
	}
}

func (c *NetConf) sharedLinkFields() []field {
	return []field{{"type", plain(&c.SharedLink.Type)}, {"mode", plain(&c.SharedLink.Mode)}}
}

func (c *NetConf) smcrFields() []field {
	return []field{
		{"pnetId", plain(&c.SMCR.PnetID)},
		{"ueid", plain(&c.SMCR.UEID)},
		{"onUnsupported", plain(&c.SMCR.OnUnsupported)},
		{"transparent", plain(&c.SMCR.Transparent)},
		{"bpffsDir", plain(&c.SMCR.BPFFSDir)},
		{"enabled", plain(&c.SMCR.Enabled)},
		{"namespaces", stringList(&c.SMCR.Namespaces, maxConfList)},
	}
}

func (c *NetConf) runtimeFields() []field {
	return []field{
		{AnnotationsCapability, plain(&c.RuntimeConfig.PodAnnotations)},
		{"deviceID", plain(&c.RuntimeConfig.DeviceID)},
		{DeviceInfoCapability, plain(&c.RuntimeConfig.DeviceInfoFile)},
	}
}

func ignore(string, json.RawMessage, *warnings) error { return nil }

// decodeIPAM keeps the section for the IPAM plugin and reads only its exact
// "type": the plugin to delegate to.
func (c *NetConf) decodeIPAM(path string, raw json.RawMessage, w *warnings) error {
	if isNull(raw) {
		return nil
	}
	obj, err := decodeObject(raw)
	if err != nil {
		return errField(path, "%v", err)
	}
	c.RawIPAM = raw
	for k := range obj {
		if k != "type" && strings.EqualFold(k, "type") {
			w.add("configuration key %q ignored (keys are case-sensitive: %q is known)", join(path, k), join(path, "type"))
		}
	}
	if t, ok := obj["type"]; ok {
		return plain(&c.IPAM.Type)(join(path, "type"), t, w)
	}
	return nil
}

// attachments decodes a GC attachment list key by key.
func attachments(dst *[]types.GCAttachment) decodeFn {
	return func(path string, raw json.RawMessage, w *warnings) error {
		items, err := list(path, raw, maxAttachments)
		if err != nil {
			return err
		}
		out := make([]types.GCAttachment, len(items))
		for i, item := range items {
			p := fmt.Sprintf("%s[%d]", path, i)
			a := &out[i]
			err := object(func() []field {
				return []field{{"containerID", plain(&a.ContainerID)}, {"ifname", plain(&a.IfName)}}
			})(p, item, w)
			if err == nil && isNull(item) {
				err = errField(p, "want a JSON object, got null")
			}
			if err != nil {
				return err
			}
		}
		*dst = out
		return nil
	}
}
