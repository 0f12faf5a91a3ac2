package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CDIKind is the CDI kind of the driver's devices: vendor/class.
const CDIKind = DriverName + "/rdma"

// cdiVersion is the CDI spec version written: deviceNodes by path only
// exist since 0.3.0; 0.6.0 is what containerd 1.7 and 2.x read.
const cdiVersion = "0.6.0"

// cdiSpecs writes and removes one CDI spec file per prepared claim, named
// after the claim's UID, so a restarted driver, and kubelet asking again,
// find what was prepared.
type cdiSpecs struct{ dir string }

func (specs cdiSpecs) path(claimUID string) string {
	return filepath.Join(specs.dir, DriverName+"-"+claimUID+".json")
}

// cdiDevice is one CDI device of a claim: its name, device nodes and
// environment (KEY=VALUE). One of the two must hold something: the CDI
// registry refuses a device without edits, and with it the whole spec.
// Its annotations carry the device's claim configuration to the plugin
// (config.ClaimConfigAnnotation); the runtime does not apply them.
type cdiDevice struct {
	name        string
	nodes       []string
	env         []string
	annotations map[string]string
}

// cdiName is the CDI device name of DRA device draName in claim claimUID
// (never reused: a claim's UID is new for every claim).
func cdiName(claimUID, draName string) string { return claimUID + "-" + draName }

// cdiID is the fully qualified CDI device ID kubelet hands the runtime.
func cdiID(name string) string { return CDIKind + "=" + name }

// write writes the spec of claimUID with devs, atomically.
func (specs cdiSpecs) write(claimUID string, devs []cdiDevice) error {
	spec := cdispec.Spec{Version: cdiVersion, Kind: CDIKind}
	for _, d := range devs {
		dev := cdispec.Device{Name: d.name, Annotations: d.annotations, ContainerEdits: cdispec.ContainerEdits{Env: d.env}}
		for _, n := range d.nodes {
			dev.ContainerEdits.DeviceNodes = append(dev.ContainerEdits.DeviceNodes, &cdispec.DeviceNode{Path: n})
		}
		spec.Devices = append(spec.Devices, dev)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(specs.dir, 0o755); err != nil {
		return fmt.Errorf("create CDI directory: %w", err)
	}
	tmp, err := os.CreateTemp(specs.dir, ".rdma-chain-cdi-*")
	if err != nil {
		return fmt.Errorf("write CDI spec: %w", err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), specs.path(claimUID))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}

// read returns the CDI device names of claimUID's spec, nil when there is
// none.
func (specs cdiSpecs) read(claimUID string) ([]string, error) {
	b, err := os.ReadFile(specs.path(claimUID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("read CDI spec of claim %s: %w", claimUID, err)
	}
	names := make([]string, 0, len(spec.Devices))
	for _, d := range spec.Devices {
		names = append(names, d.Name)
	}
	return names, nil
}

// remove removes claimUID's spec; none is no error.
func (specs cdiSpecs) remove(claimUID string) error {
	if err := os.Remove(specs.path(claimUID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}
