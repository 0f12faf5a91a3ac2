package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// confAt is a minimal valid entry at cniVersion v with extra keys appended.
func confAt(v, extra string) string {
	return `{"cniVersion":"` + v + `","name":"net","type":"rdma-chain"` + extra + `}`
}

// prevAt is an entry at v whose prevResult is body.
func prevAt(v, body string) string { return confAt(v, `,"prevResult":`+body) }

// repeat renders n copies of elem as a JSON array.
func repeat(elem string, n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat(elem+",", n), ",") + "]"
}

const eth0 = `{"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"/run/netns/p"}`

type hostileCase struct {
	name  string
	input string // stdin, or CNI_ARGS when args is set
	args  bool
	code  uint
	field string // must appear in the message; "" for a whole-input error
}

func hostileConfigs() []hostileCase {
	long := strings.Repeat("a", 65)
	return []hostileCase{
		{"not json", `{"cniVersion":`, false, 7, ""},
		{"array", `[]`, false, 7, ""},
		{"null", `null`, false, 7, ""},
		{"mode number", confAt("1.0.0", `,"mode":1`), false, 7, `"mode"`},
		{"devices string", confAt("1.0.0", `,"devices":"rxe0"`), false, 7, `"devices"`},
		{"devices null entry", confAt("1.0.0", `,"devices":[null]`), false, 7, `"devices[0]"`},
		{"devices huge", confAt("1.0.0", `,"devices":`+repeat(`"a"`, 1025)), false, 7, `"devices"`},
		{"devices path", confAt("1.0.0", `,"devices":["../etc"]`), false, 7, `"devices"`},
		{"dad string", confAt("1.0.0", `,"dad":"yes"`), false, 7, `"dad"`},
		{"sharedLink string", confAt("1.0.0", `,"sharedLink":"ipvlan"`), false, 7, `"sharedLink"`},
		{"smcr array", confAt("1.0.0", `,"smcr":[]`), false, 7, `"smcr"`},
		{"smcr ueid long", confAt("1.0.0", `,"smcr":{"ueid":"`+strings.Repeat("A", 33)+`"}`), false, 7, `"smcr.ueid"`},
		{"runtimeConfig number", confAt("1.0.0", `,"runtimeConfig":5`), false, 7, `"runtimeConfig"`},
		{"annotations not strings", confAt("1.0.0", `,"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":true}}`), false, 7, `"runtimeConfig.io.kubernetes.cri.pod-annotations"`},
		{"annotations list", confAt("1.0.0", `,"runtimeConfig":{"io.kubernetes.cri.pod-annotations":["a"]}`), false, 7, `"runtimeConfig.io.kubernetes.cri.pod-annotations"`},
		{"runtime deviceID path", confAt("1.0.0", `,"runtimeConfig":{"deviceID":"../../etc passwd"}`), false, 7, `"runtimeConfig.deviceID"`},
		{"deviceID traversal", confAt("1.0.0", `,"deviceID":"../../dev/mem"`), false, 7, `"deviceID"`},
		{"deviceID two slashes", confAt("1.0.0", `,"deviceID":"erdma_0/1/2"`), false, 7, `"deviceID"`},
		{"deviceID space", confAt("1.0.0", `,"deviceID":"a b"`), false, 7, `"deviceID"`},
		{"deviceID long", confAt("1.0.0", `,"deviceID":"`+long+`"`), false, 7, `"deviceID"`},
		{"deviceID newline", confAt("1.0.0", `,"deviceID":"mlx5_0\n"`), false, 7, `"deviceID"`},
		{"ipam type path", confAt("1.0.0", `,"ipam":{"type":"/usr/bin/evil"}`), false, 7, `"ipam.type"`},
		{"ipam type dotdot", confAt("1.0.0", `,"ipam":{"type":"../host-local"}`), false, 7, `"ipam.type"`},
		{"ipam type dot", confAt("1.0.0", `,"ipam":{"type":".hidden"}`), false, 7, `"ipam.type"`},
		{"ipam type long", confAt("1.0.0", `,"ipam":{"type":"`+long+`"}`), false, 7, `"ipam.type"`},
		{"ipam type number", confAt("1.0.0", `,"ipam":{"type":5}`), false, 7, `"ipam.type"`},
		{"ipam string", confAt("1.0.0", `,"ipam":"host-local"`), false, 7, `"ipam"`},
		{"ipam case-variant type only", confAt("1.0.0", `,"ipam":{"TYPE":"host-local"}`), false, 7, `"ipam.type"`},
		{"ipam no type", confAt("1.0.0", `,"ipam":{"subnet":"fd00::/64"}`), false, 7, `"ipam.type"`},
		{"name slash", `{"cniVersion":"1.0.0","name":"a/b"}`, false, 7, `"name"`},
		{"name missing", `{"cniVersion":"1.0.0","type":"rdma-chain"}`, false, 7, `"name"`},
		{"cniVersion missing", `{"name":"n"}`, false, 7, `"cniVersion"`},
		{"cniVersion number", `{"cniVersion":1.0,"name":"n"}`, false, 7, `"cniVersion"`},
		{"cniVersion future", confAt("2.0.0", ""), false, types.ErrIncompatibleCNIVersion, `"cniVersion"`},
		{"cniVersion 0.2.0", confAt("0.2.0", ""), false, types.ErrIncompatibleCNIVersion, `"cniVersion"`},
		{"cniVersion garbage", confAt("1.x", ""), false, types.ErrIncompatibleCNIVersion, `"cniVersion"`},
		{"attachments not list", confAt("1.1.0", `,"cni.dev/valid-attachments":{}`), false, 7, `"cni.dev/valid-attachments"`},
		{"attachments null entry", confAt("1.1.0", `,"cni.dev/valid-attachments":[null]`), false, 7, `"cni.dev/valid-attachments[0]"`},
		{"attachments bad id", confAt("1.1.0", `,"cni.dev/valid-attachments":[{"containerID":"../x","ifname":"eth0"}]`), false, 7, `"cni.dev/valid-attachments[0].containerID"`},
		{"attachments case-variant id", confAt("1.1.0", `,"cni.dev/valid-attachments":[{"ContainerID":"a","ifname":"eth0"}]`), false, 7, `"cni.dev/valid-attachments[0].containerID"`},
		{"legacy attachments bad ifname", confAt("1.0.0", `,"cni.dev/attachments":[{"containerID":"a","ifname":"a/b"}]`), false, 7, `"cni.dev/attachments[0].ifname"`},
		{"logFile relative", confAt("1.0.0", `,"logFile":"log.txt"`), false, 7, `"logFile"`},
		{"dataDir dotdot", confAt("1.0.0", `,"dataDir":"/var/lib/../../etc"`), false, 7, `"dataDir"`},
		{"socket relative", confAt("1.0.0", `,"podResourcesSocket":"kubelet.sock"`), false, 7, `"podResourcesSocket"`},
		{"ifName colon", confAt("1.0.0", `,"ifName":"eth0:1"`), false, 7, `"ifName"`},
		{"resourceNames number", confAt("1.0.0", `,"resourceNames":[1]`), false, 7, `"resourceNames[0]"`},
		{"capabilities not bool", confAt("1.0.0", `,"capabilities":{"x":"yes"}`), false, 7, `"capabilities"`},
	}
}

// hostilePrevResults returns, at every version with a result type,
// nulls and out-of-range indexes, then wrong types, huge lists and bad
// addresses.
func hostilePrevResults() []hostileCase {
	var out []hostileCase
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		out = append(out,
			hostileCase{v + " null interface", prevAt(v, `{"interfaces":[null]}`), false, 6, `"prevResult.interfaces[0]"`},
			hostileCase{v + " null ip", prevAt(v, `{"ips":[null]}`), false, 6, `"prevResult.ips[0]"`},
			hostileCase{v + " null route", prevAt(v, `{"routes":[null]}`), false, 6, `"prevResult.routes[0]"`},
			hostileCase{v + " index out of range", prevAt(v, `{"interfaces":[`+eth0+`],"ips":[{"interface":1,"address":"10.0.0.2/24"}]}`), false, 6, `"prevResult.ips[0].interface"`},
			hostileCase{v + " index without interfaces", prevAt(v, `{"ips":[{"interface":0,"address":"10.0.0.2/24"}]}`), false, 6, `"prevResult.ips[0].interface"`},
		)
	}
	ip := func(s string) string { return prevAt("1.0.0", `{"interfaces":[`+eth0+`],"ips":[`+s+`]}`) }
	return append(out, []hostileCase{
		{"prevResult string", prevAt("1.0.0", `"x"`), false, 6, `"prevResult"`},
		{"prevResult array", prevAt("1.0.0", `[]`), false, 6, `"prevResult"`},
		{"interfaces string", prevAt("0.4.0", `{"interfaces":"x"}`), false, 6, `"prevResult.interfaces"`},
		{"interfaces huge", prevAt("1.0.0", `{"interfaces":`+repeat(eth0, 1025)+`}`), false, 6, `"prevResult.interfaces"`},
		{"ips huge", prevAt("1.0.0", `{"ips":`+repeat(`{"address":"10.0.0.2/24"}`, 1025)+`}`), false, 6, `"prevResult.ips"`},
		{"ip without prefix", ip(`{"interface":0,"address":"10.0.0.2"}`), false, 6, `"prevResult.ips[0].address"`},
		{"ip without address", ip(`{"interface":0}`), false, 6, `"prevResult.ips[0].address"`},
		{"ip null address", ip(`{"address":null}`), false, 6, `"prevResult.ips[0].address"`},
		{"ip negative index", ip(`{"interface":-1,"address":"10.0.0.2/24"}`), false, 6, `"prevResult.ips[0].interface"`},
		{"ip string index", ip(`{"interface":"0","address":"10.0.0.2/24"}`), false, 6, `"prevResult.ips[0].interface"`},
		{"ip fraction index", ip(`{"interface":0.5,"address":"10.0.0.2/24"}`), false, 6, `"prevResult.ips[0].interface"`},
		{"ip huge index", ip(`{"interface":1e30,"address":"10.0.0.2/24"}`), false, 6, `"prevResult.ips[0].interface"`},
		{"ip bad gateway", ip(`{"address":"10.0.0.2/24","gateway":"ten"}`), false, 6, `"prevResult.ips[0].gateway"`},
		{"ip bad version", prevAt("0.4.0", `{"ips":[{"version":"5","address":"10.0.0.2/24"}]}`), false, 6, `"prevResult.ips[0].version"`},
		{"route without dst", prevAt("1.0.0", `{"routes":[{"gw":"10.0.0.1"}]}`), false, 6, `"prevResult.routes[0].dst"`},
		{"route bad gw", prevAt("1.0.0", `{"routes":[{"dst":"0.0.0.0/0","gw":"nope"}]}`), false, 6, `"prevResult.routes[0].gw"`},
		{"route table string", prevAt("1.1.0", `{"routes":[{"dst":"0.0.0.0/0","table":"main"}]}`), false, 6, `"prevResult.routes[0].table"`},
		{"bad mac", prevAt("1.0.0", `{"interfaces":[{"name":"eth0","mac":"zz"}]}`), false, 6, `"prevResult.interfaces[0].mac"`},
		{"mtu string", prevAt("1.0.0", `{"interfaces":[{"name":"eth0","mtu":"1500"}]}`), false, 6, `"prevResult.interfaces[0].mtu"`},
		{"name huge", prevAt("1.0.0", `{"interfaces":[{"name":"`+strings.Repeat("a", 5000)+`"}]}`), false, 6, `"prevResult.interfaces[0].name"`},
		{"dns string", prevAt("1.0.0", `{"dns":"x"}`), false, 6, `"prevResult.dns"`},
		{"dns null nameserver", prevAt("0.4.0", `{"dns":{"nameservers":[null]}}`), false, 6, `"prevResult.dns.nameservers[0]"`},
		{"result newer than conf", prevAt("0.4.0", `{"cniVersion":"1.0.0"}`), false, 6, `"prevResult"`},
		{"result older than conf", prevAt("1.0.0", `{"cniVersion":"0.4.0"}`), false, 6, `"prevResult"`},
		{"result version number", prevAt("1.0.0", `{"cniVersion":1}`), false, 6, `"prevResult.cniVersion"`},
	}...)
}

func hostileArgs() []hostileCase {
	return []hostileCase{
		{"args no equals", "K8S_POD_NAME", true, 7, "CNI_ARGS"},
		{"args two equals", "IgnoreUnknown=1;K8S_POD_NAME=a=b", true, 7, "CNI_ARGS"},
		{"args empty pair", "IgnoreUnknown=1;;K8S_POD_NAME=a", true, 7, "CNI_ARGS"},
		{"args unknown key", "FOO=bar", true, 7, "CNI_ARGS"},
		{"args case-variant key", "k8s_pod_name=a", true, 7, "CNI_ARGS"},
		{"args embedded struct", "CommonArgs=1", true, 7, "CNI_ARGS"},
		{"args bad IgnoreUnknown", "IgnoreUnknown=maybe", true, 7, "CNI_ARGS"},
		{"args name path", "IgnoreUnknown=1;K8S_POD_NAMESPACE=a;K8S_POD_NAME=../x", true, 7, `"K8S_POD_NAME"`},
		{"args name upper", "K8S_POD_NAMESPACE=a;K8S_POD_NAME=Web", true, 7, `"K8S_POD_NAME"`},
		{"args name long", "K8S_POD_NAMESPACE=a;K8S_POD_NAME=" + strings.Repeat("a", 254), true, 7, `"K8S_POD_NAME"`},
		{"args name NUL", "K8S_POD_NAMESPACE=a;K8S_POD_NAME=a\x00b", true, 7, `"K8S_POD_NAME"`},
		{"args name newline", "K8S_POD_NAMESPACE=a;K8S_POD_NAME=a\nb", true, 7, `"K8S_POD_NAME"`},
		{"args empty namespace", "K8S_POD_NAMESPACE=;K8S_POD_NAME=a", true, 7, `"K8S_POD_NAMESPACE"`},
		{"args name alone", "K8S_POD_NAME=a", true, 7, `"K8S_POD_NAME"`},
		{"args uid slash", "K8S_POD_UID=a/b", true, 7, `"K8S_POD_UID"`},
		{"args infra id path", "K8S_POD_INFRA_CONTAINER_ID=../x", true, 7, `"K8S_POD_INFRA_CONTAINER_ID"`},
	}
}

func TestHostileInput(t *testing.T) {
	cases := append(append(hostileConfigs(), hostilePrevResults()...), hostileArgs()...)
	if len(cases) < 60 {
		t.Fatalf("only %d hostile cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.args {
				_, err = ParseArgs(tc.input)
			} else {
				var conf *NetConf
				conf, _, err = Parse([]byte(tc.input))
				if conf != nil {
					t.Errorf("Parse returned a conf with error %v", err)
				}
			}
			assertCNIError(t, err, tc.code, tc.field)
		})
	}
}

func assertCNIError(t *testing.T, err error, code uint, field string) {
	t.Helper()
	var te *types.Error
	if !errors.As(err, &te) {
		t.Fatalf("want a CNI error with code %d, got %#v", code, err)
	}
	if te.Code != code || te.Msg == "" {
		t.Fatalf("got code %d %q (%s), want code %d", te.Code, te.Msg, te.Details, code)
	}
	if !strings.Contains(te.Msg, field) {
		t.Errorf("message %q does not name %s", te.Msg, field)
	}
	if len(te.Msg)+len(te.Details) > 400 {
		t.Errorf("message too long (%d bytes): %.80s...", len(te.Msg)+len(te.Details), te.Details)
	}
	_ = fmt.Sprint
}
