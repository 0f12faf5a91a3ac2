package config

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

const minimal = `{"cniVersion":"1.0.0","name":"net","type":"rdma-chain"`

func parse(t *testing.T, extra string) (*NetConf, []string, error) {
	t.Helper()
	return Parse([]byte(minimal + extra + "}"))
}

func TestDefaults(t *testing.T) {
	conf, warnings, err := parse(t, "")
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Parse: %v %v", err, warnings)
	}
	want := map[string]any{
		"Mode": ModeAuto, "PodSelection": "requested", "PodResourcesSocket": DefaultPodResourcesSocket, "CDIDir": DefaultCDIDir, "KubeletUnreachable": KubeletRetry,
		"IfName": "rdma", "DataDir": DefaultDataDir, "LogLevel": "info", "LogFile": "",
		"ResourceNames": []string{"aliyun/erdma", "rdma/hca"}, "Devices": []string(nil),
		"DRADrivers": []string{"rdma-chain.github.io"},
		"SharedLink": SharedLink{Type: "ipvlan", Mode: "l2"},
		"SMCR":       SMCR{OnUnsupported: "warn", Transparent: TransparentAuto, BPFFSDir: DefaultBPFFSDir},
	}
	v := reflect.ValueOf(conf).Elem()
	for field, w := range want {
		if got := v.FieldByName(field).Interface(); !reflect.DeepEqual(got, w) {
			t.Errorf("%s = %#v, want %#v", field, got, w)
		}
	}
}

func TestEveryField(t *testing.T) {
	conf, _, err := parse(t, `,"mode":"shared","devices":["rxe0","eth1"],"nodeAddresses":["192.168.50.12","fd00:10:2::1"],"podSelection":"all",
		"resourceNames":["rdma/hca"],"draDrivers":["dra.example.com"],"podResourcesSocket":"/run/k.sock","cdiDir":"/etc/cdi","kubeletUnreachable":"passThrough","ifName":"roce",
		"sharedLink":{"type":"macvlan"},"smcr":{"pnetId":"ABC123","ueid":"UEID-1.X","onUnsupported":"fail"},
		"dataDir":"/run/rc","logFile":"/var/log/rc.log","logLevel":"debug","deviceID":"mlx5_1",
		"ipam":{"type":"host-local"},"dad":true,"drain":true,"runtimeConfig":{"deviceID":"0000:3b:00.0",
		"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"TRUE"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(conf.NodeAddresses, []string{"192.168.50.12", "fd00:10:2::1"}) {
		t.Errorf("NodeAddresses = %q", conf.NodeAddresses)
	}
	if conf.Mode != "shared" || conf.PodSelection != "all" || conf.IfName != "roce" ||
		conf.SharedLink != (SharedLink{Type: "macvlan", Mode: "bridge"}) || conf.SMCR.PnetID != "ABC123" ||
		conf.SMCR.UEID != "UEID-1.X" || conf.SMCR.OnUnsupported != "fail" || conf.DataDir != "/run/rc" ||
		conf.LogFile != "/var/log/rc.log" || !conf.DAD || conf.LogLevel != "debug" || conf.PodResourcesSocket != "/run/k.sock" || conf.CDIDir != "/etc/cdi" ||
		conf.KubeletUnreachable != KubeletPassThrough || !conf.Drain ||
		!reflect.DeepEqual(conf.Devices, []string{"rxe0", "eth1"}) || conf.IPAM.Type != "host-local" ||
		!reflect.DeepEqual(conf.DRADrivers, []string{"dra.example.com"}) {
		t.Errorf("fields not parsed: %+v", conf)
	}
	if got := conf.RequestedDeviceID(); got != "0000:3b:00.0" {
		t.Errorf("RequestedDeviceID = %q, runtimeConfig must win", got)
	}
	if on, w := conf.SMCRRequested(); !on || w != "" {
		t.Errorf("SMCRRequested = %v %q", on, w)
	}
	if conf.PodIfName(1) != "roce1" {
		t.Errorf("PodIfName(1) = %q", conf.PodIfName(1))
	}
}

func TestInvalid(t *testing.T) {
	cases := []struct{ name, extra, field string }{
		{"mode", `,"mode":"both"`, "mode"},
		{"device name", `,"devices":["../etc"]`, "devices"},
		{"device long", `,"devices":["abcdefghijklmnopq"]`, "devices"},
		{"device twice", `,"devices":["rxe0","rxe0"]`, "devices"},
		{"node address not an address", `,"nodeAddresses":["node-a"]`, "nodeAddresses"},
		{"node address with a prefix", `,"nodeAddresses":["192.168.50.12/24"]`, "nodeAddresses"},
		{"node address list in one string", `,"nodeAddresses":["192.168.50.12,fd00::1"]`, "nodeAddresses"},
		{"node address not canonical", `,"nodeAddresses":["FD00::0001"]`, "nodeAddresses"},
		{"node address with a zone", `,"nodeAddresses":["fe80::1%eth1"]`, "nodeAddresses"},
		{"node address unspecified", `,"nodeAddresses":["0.0.0.0"]`, "nodeAddresses"},
		{"node address loopback", `,"nodeAddresses":["::1"]`, "nodeAddresses"},
		{"node address twice", `,"nodeAddresses":["192.168.50.12","192.168.50.12"]`, "nodeAddresses"},
		{"node addresses too many", `,"nodeAddresses":["10.0.0.1","10.0.0.2","10.0.0.3","10.0.0.4","10.0.0.5","10.0.0.6","10.0.0.7","10.0.0.8","10.0.0.9","10.0.0.10","10.0.0.11","10.0.0.12","10.0.0.13","10.0.0.14","10.0.0.15","10.0.0.16","10.0.0.17"]`, "nodeAddresses"},
		{"selection", `,"podSelection":"some"`, "podSelection"},
		{"kubelet unreachable", `,"kubeletUnreachable":"ignore"`, "kubeletUnreachable"},
		{"kubelet unreachable case", `,"kubeletUnreachable":"passthrough"`, "kubeletUnreachable"},
		{"resource", `,"resourceNames":["hca"]`, "resourceNames"},
		{"resources and drivers empty", `,"resourceNames":[],"draDrivers":[]`, "resourceNames"},
		{"driver upper case", `,"draDrivers":["Rdma.example.com"]`, "draDrivers"},
		{"driver with slash", `,"draDrivers":["example.com/rdma"]`, "draDrivers"},
		{"driver long", `,"draDrivers":["` + strings.Repeat("a", 64) + `"]`, "draDrivers"},
		{"driver empty", `,"draDrivers":[""]`, "draDrivers"},
		{"socket relative", `,"podResourcesSocket":"kubelet.sock"`, "podResourcesSocket"},
		{"cdiDir relative", `,"cdiDir":"cdi"`, "cdiDir"},
		{"cdiDir not clean", `,"cdiDir":"/var/run/../cdi"`, "cdiDir"},
		{"ifName long", `,"ifName":"abcdefghijklm"`, "ifName"},
		{"ifName dot", `,"ifName":"a.b"`, "ifName"},
		{"link type", `,"sharedLink":{"type":"veth"}`, "sharedLink.type"},
		{"link mode", `,"sharedLink":{"type":"ipvlan","mode":"bridge"}`, "sharedLink.mode"},
		{"none mode", `,"sharedLink":{"type":"none","mode":"l2"}`, "sharedLink.mode"},
		{"soft-RoCE name", `,"podSoftRoCE":"eth 1"`, "podSoftRoCE"},
		{"soft-RoCE name long", `,"podSoftRoCE":"abcdefghijklmnop"`, "podSoftRoCE"},
		{"soft-RoCE not a string", `,"podSoftRoCE":true`, "podSoftRoCE"},
		{"soft-RoCE exclusive", `,"podSoftRoCE":"eth1","mode":"exclusive"`, "podSoftRoCE"},
		{"soft-RoCE ipvlan", `,"podSoftRoCE":"eth1","sharedLink":{"type":"ipvlan"}`, "sharedLink.type"},
		{"soft-RoCE none", `,"podSoftRoCE":"eth1","sharedLink":{"type":"none"}`, "sharedLink.type"},
		{"soft-RoCE private", `,"podSoftRoCE":"eth1","sharedLink":{"type":"macvlan","mode":"private"}`, "sharedLink.mode"},
		{"soft-RoCE devices", `,"podSoftRoCE":"eth1","devices":["rxe0"]`, "devices"},
		{"pnetId", `,"smcr":{"pnetId":"has space"}`, "smcr.pnetId"},
		{"pnetId long", `,"smcr":{"pnetId":"ABCDEFGHIJKLMNOPQ"}`, "smcr.pnetId"},
		{"ueid", `,"smcr":{"ueid":"-X"}`, "smcr.ueid"},
		{"onUnsupported", `,"smcr":{"onUnsupported":"ignore"}`, "smcr.onUnsupported"},
		{"transparent", `,"smcr":{"transparent":"ebpf"}`, "smcr.transparent"},
		{"bpffsDir", `,"smcr":{"bpffsDir":"rdma-chain"}`, "smcr.bpffsDir"},
		{"device-info relative", `,"runtimeConfig":{"CNIDeviceInfoFile":"devinfo/x.json"}`, "runtimeConfig.CNIDeviceInfoFile"},
		{"device-info dot-dot", `,"runtimeConfig":{"CNIDeviceInfoFile":"/run/../etc/x.json"}`, "runtimeConfig.CNIDeviceInfoFile"},
		{"device-info root", `,"runtimeConfig":{"CNIDeviceInfoFile":"/"}`, "runtimeConfig.CNIDeviceInfoFile"},
		{"device-info over-long", `,"runtimeConfig":{"CNIDeviceInfoFile":"/` + strings.Repeat("a/", 50000) + `x"}`, "runtimeConfig.CNIDeviceInfoFile"},
		{"smcr enabled string", `,"smcr":{"enabled":"false"}`, "smcr.enabled"},
		{"smcr namespaces empty", `,"smcr":{"namespaces":[]}`, "smcr.namespaces"},
		{"smcr namespace upper case", `,"smcr":{"namespaces":["Team-A"]}`, "smcr.namespaces"},
		{"smcr namespace too long", `,"smcr":{"namespaces":["` + strings.Repeat("a", 64) + `"]}`, "smcr.namespaces"},
		{"smcr namespace dot", `,"smcr":{"namespaces":["a.b"]}`, "smcr.namespaces"},
		{"smcr namespace twice", `,"smcr":{"namespaces":["a","a"]}`, "smcr.namespaces"},
		{"smcr namespaces not strings", `,"smcr":{"namespaces":[1]}`, "smcr.namespaces[0]"},
		{"smcr namespaces object", `,"smcr":{"namespaces":{"a":true}}`, "smcr.namespaces"},
		{"dataDir", `,"dataDir":"/var/../etc"`, "dataDir"},
		{"logFile", `,"logFile":"log.txt"`, "logFile"},
		{"logLevel", `,"logLevel":"trace"`, "logLevel"},
		{"ipam type", `,"ipam":{"subnet":"fd00::/64"}`, "ipam.type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parse(t, tc.extra)
			assertCode7(t, err, tc.field)
		})
	}
}

func TestRequiredAndDecode(t *testing.T) {
	for name, in := range map[string]string{
		"no version": `{"name":"n","type":"rdma-chain"}`,
		"no name":    `{"cniVersion":"1.0.0","type":"rdma-chain"}`,
		"not json":   `{"cniVersion":`,
		"bad type":   minimal + `,"devices":"rxe0"}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := Parse([]byte(in))
			assertCode7(t, err, "")
		})
	}
}

func TestUnknownKeysWarn(t *testing.T) {
	conf, warnings, err := parse(t, `,"zeta":1,"alpha":{"x":true}`)
	if err != nil || conf == nil {
		t.Fatalf("unknown keys must not fail: %v", err)
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], `"alpha"`) || !strings.Contains(warnings[1], `"zeta"`) {
		t.Errorf("warnings = %q", warnings)
	}
}

func TestValidAttachmentsMerged(t *testing.T) {
	conf, _, err := parse(t, `,"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}],
		"cni.dev/attachments":[{"containerID":"b","ifname":"eth0"}]`)
	if err != nil {
		t.Fatal(err)
	}
	got := conf.ValidAttachments()
	want := []types.GCAttachment{{ContainerID: "a", IfName: "eth0"}, {ContainerID: "b", IfName: "eth0"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ValidAttachments = %v", got)
	}
}

func assertCode7(t *testing.T, err error, field string) {
	t.Helper()
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig {
		t.Fatalf("want CNI error code 7, got %#v", err)
	}
	if field != "" && !strings.Contains(te.Msg, `"`+field+`"`) {
		t.Errorf("message %q does not name field %q", te.Msg, field)
	}
}

// TestDRADriversOnly checks that, with draDrivers, podSelection requested
// needs no resourceNames: the pods that claimed a device of those drivers
// are the requested ones.
func TestDRADriversOnly(t *testing.T) {
	conf, _, err := parse(t, `,"resourceNames":[],"draDrivers":["rdma-chain.github.io","dra.example.com"]`)
	if err != nil {
		t.Fatal(err)
	}
	if len(conf.ResourceNames) != 0 || !reflect.DeepEqual(conf.DRADrivers, []string{"rdma-chain.github.io", "dra.example.com"}) {
		t.Errorf("ResourceNames %v, DRADrivers %v", conf.ResourceNames, conf.DRADrivers)
	}
}
