package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

const (
	srcClass = resourceapi.AllocationConfigSourceClass
	srcClaim = resourceapi.AllocationConfigSourceClaim
)

// rdmaConfig is an RDMAConfig with fields (JSON members, each led by a
// comma).
func rdmaConfig(fields string) string {
	return `{"apiVersion": "rdma-chain.github.io/v1alpha1", "kind": "RDMAConfig"` + fields + `}`
}

// opaque is an allocation's config entry of driver from src.
func opaque(src resourceapi.AllocationConfigSource, driver, params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{Source: src, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}}}}
}

// configured is claim uid allocated results, with configs.
func configured(uid string, configs []resourceapi.DeviceAllocationConfiguration, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c := claim(uid, results...)
	c.Status.Allocation.Devices.Config = configs
	return c
}

func TestClaimConfigs(t *testing.T) {
	one := []resourceapi.DeviceRequestAllocationResult{result("rdma", "node1", "mlx5-0"),
		{Request: "gpu", Driver: "gpu.example.com", Pool: "node1", Device: "gpu-0"}}
	two := []resourceapi.DeviceRequestAllocationResult{result("rdma", "node1", "mlx5-0"), result("pick/fast", "node1", "rxe0")}
	for _, tc := range []struct {
		name    string
		results []resourceapi.DeviceRequestAllocationResult
		configs []resourceapi.DeviceAllocationConfiguration
		want    map[string]string // device: config.ClaimConfig.String()
		err     []string          // substrings of the error
	}{
		{name: "none", results: one},
		{name: "the class's first, the claim's over it, whatever the list's order", results: one, configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(srcClaim, DriverName, rdmaConfig(`, "ipv6": false`)),
			opaque(srcClass, DriverName, rdmaConfig(`, "ipv6": true, "ifName": "roce0", "smcr": true, "sharedLink": "none"`))},
			want: map[string]string{"mlx5-0": "smcr=true ipv6=false ifName=roce0 sharedLink=none"}},
		{name: "a later entry of the same source wins", results: one, configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(srcClass, DriverName, rdmaConfig(`, "ifName": "a"`)),
			opaque(srcClass, DriverName, rdmaConfig(`, "ifName": "b"`))},
			want: map[string]string{"mlx5-0": "ifName=b"}},
		{name: "requests and subrequests", results: two, configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(srcClaim, DriverName, rdmaConfig(`, "ifName": "roce0"`), "rdma"),
			opaque(srcClaim, DriverName, rdmaConfig(`, "ifName": "roce1"`), "pick"),
			opaque(srcClass, DriverName, rdmaConfig(`, "sharedLink": "macvlan"`), "pick/fast"),
			opaque(srcClaim, DriverName, rdmaConfig(`, "ipv6": false`), "pick/slow", "other")},
			want: map[string]string{"mlx5-0": "ifName=roce0", "rxe0": "ifName=roce1 sharedLink=macvlan"}},
		{name: "other drivers' configs", results: one, configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(srcClaim, "gpu.example.com", `{"smcr": "yes"}`),
			{Source: srcClaim}}},
		{name: "smcr true from the class", results: one, configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(srcClass, DriverName, rdmaConfig(`, "smcr": true`))},
			want: map[string]string{"mlx5-0": "smcr=true"}},
		{name: "smcr false from the claim", results: one, configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(srcClass, DriverName, rdmaConfig(`, "smcr": true`)),
			opaque(srcClaim, DriverName, rdmaConfig(`, "smcr": false`))},
			want: map[string]string{"mlx5-0": "smcr=false"}},
		{name: "smcr true from the claim", results: one, configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(srcClaim, DriverName, rdmaConfig(`, "smcr": true`))},
			err: []string{"claim default/c-u1", "config[0] (RDMAConfig of the ResourceClaim)", `field "smcr"`, "DeviceClass"}},
		{name: "sharedLink from the claim", results: one, configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(srcClaim, DriverName, rdmaConfig(`, "sharedLink": "macvlan"`))},
			err: []string{"config[0] (RDMAConfig of the ResourceClaim)", `field "sharedLink"`, "DeviceClass"}},
		{name: "an unknown source is the claim's", results: one, configs: []resourceapi.DeviceAllocationConfiguration{
			opaque("FromElsewhere", DriverName, rdmaConfig(`, "smcr": true`))},
			err: []string{`field "smcr"`}},
		{name: "a bad field", results: one, configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(srcClass, DriverName, rdmaConfig(`, "ifName": "roce0"`)),
			opaque(srcClass, DriverName, rdmaConfig(`, "sharedLink": "vlan"`))},
			err: []string{"config[1] (RDMAConfig of the DeviceClass)", `field "sharedLink": "vlan"`}},
		{name: "a bad entry of no result here", results: one, configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(srcClaim, DriverName, rdmaConfig(`, "ifname": "x"`), "other")},
			err: []string{`field "ifname": unknown field`}},
		{name: "one ifName on two devices", results: two, configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(srcClaim, DriverName, rdmaConfig(`, "ifName": "roce0"`))},
			err: []string{`field "ifName": "roce0"`, "device mlx5-0 (request rdma)", "device rxe0 (request pick/fast)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := configured("u1", tc.configs, tc.results...)
			got, err := claimConfigs(c)
			if len(tc.err) > 0 {
				var ce *configError
				if !errors.As(err, &ce) {
					t.Fatalf("error %v, want a configError", err)
				}
				for _, s := range tc.err {
					if !strings.Contains(err.Error(), s) {
						t.Fatalf("error %q, want %q in it", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			byDevice := map[string]string{}
			for i, cfg := range got {
				byDevice[c.Status.Allocation.Devices.Results[i].Device] = cfg.String()
			}
			if len(byDevice)+len(tc.want) > 0 && !reflect.DeepEqual(byDevice, tc.want) {
				t.Fatalf("configs %v, want %v", byDevice, tc.want)
			}
		})
	}
}

// TestPrepareClaimConfig checks that a device's resolved configuration is
// the annotation of its CDI device, read back as it was resolved; a device
// without one has none; a claim prepared before is answered from its spec
// unchanged.
func TestPrepareClaimConfig(t *testing.T) {
	d, _ := testDriver(t)
	c := configured("u1", []resourceapi.DeviceAllocationConfiguration{
		opaque(srcClass, DriverName, rdmaConfig(`, "smcr": true`), "rdma"),
		opaque(srcClaim, DriverName, rdmaConfig(`, "ifName": "roce0", "ipv6": false`), "rdma")},
		result("rdma", "node1", "mlx5-0"), result("plain", "node1", "rxe0"))
	got, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil || got["u1"].Err != nil {
		t.Fatalf("prepare: %v %+v", err, got)
	}
	b, spec := writtenSpec(t, d, "u1")
	ann := map[string]map[string]string{}
	for _, dev := range spec.Devices {
		ann[dev.Name] = dev.Annotations
	}
	back, err := config.ParseClaimConfig([]byte(ann["u1-mlx5-0"][config.ClaimConfigAnnotation]))
	if err != nil || back.String() != "smcr=true ipv6=false ifName=roce0" || len(ann["u1-mlx5-0"]) != 1 {
		t.Fatalf("annotations of u1-mlx5-0 %v: %s %v", ann["u1-mlx5-0"], back, err)
	}
	if a, ok := ann["u1-rxe0"]; !ok || a != nil {
		t.Fatalf("annotations of u1-rxe0 %v (listed %t), want none", a, ok)
	}

	restarted := &Driver{NodeName: "node1", SysRoot: d.SysRoot, CDIDir: d.CDIDir, Log: d.Log}
	restarted.SetNode(&Node{})
	again, err := restarted.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil || again["u1"].Err != nil || !reflect.DeepEqual(again["u1"].Devices, got["u1"].Devices) {
		t.Fatalf("prepare again: %v %+v", err, again)
	}
	if b2, _ := os.ReadFile(d.specs().path("u1")); string(b2) != string(b) {
		t.Fatal("preparing again rewrote the spec")
	}
}

// TestPrepareRefusesConfig checks that a refused configuration fails the
// claim's Prepare, writes no spec, and is kept for the claim's status, on
// this driver's devices of this pool, until a Prepare succeeds or the
// claim is unprepared.
func TestPrepareRefusesConfig(t *testing.T) {
	d, _ := testDriver(t)
	bad := configured("u1", []resourceapi.DeviceAllocationConfiguration{
		opaque(srcClaim, DriverName, rdmaConfig(`, "smcr": true`))},
		result("rdma", "node1", "mlx5-0"), result("rdma", "node2", "mlx5-0"),
		resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.example.com", Pool: "node1", Device: "gpu-0"})
	good := bad.DeepCopy()
	good.Status.Allocation.Devices.Config = nil
	ref := claimRef{Namespace: "default", Name: "c-u1"}
	prepare := func(c *resourceapi.ResourceClaim) error {
		t.Helper()
		got, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
		if err != nil {
			t.Fatal(err)
		}
		return got["u1"].Err
	}

	err := prepare(bad)
	if err == nil || !strings.Contains(err.Error(), `field "smcr"`) || !strings.Contains(err.Error(), "claim default/c-u1") {
		t.Fatalf("prepare: %v, want the claim and the field named", err)
	}
	if _, err := os.Stat(d.specs().path("u1")); !os.IsNotExist(err) {
		t.Fatal("a refused claim got a CDI spec")
	}
	want := map[claimRef][]deviceStatus{ref: {{Pool: "node1", Device: "mlx5-0", InvalidConfig: true, Message: err.Error()}}}
	if got := d.invalidConfigStatuses(); !reflect.DeepEqual(got, want) {
		t.Fatalf("kept %+v, want %+v", got, want)
	}
	if err := prepare(good); err != nil {
		t.Fatal(err)
	}
	if got := d.invalidConfigStatuses(); got != nil {
		t.Fatalf("kept %+v after a Prepare that succeeded", got)
	}
	if _, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "u1"}}); err != nil {
		t.Fatal(err)
	}
	_ = prepare(bad)
	if _, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "u1"}}); err != nil {
		t.Fatal(err)
	}
	if got := d.invalidConfigStatuses(); got != nil {
		t.Fatalf("kept %+v after Unprepare", got)
	}
}

func TestInvalidConfigsBounded(t *testing.T) {
	var ic invalidConfigs
	refused := &configError{errors.New("field \"ifName\": bad")}
	note := func(i int) {
		c := configured(fmt.Sprint(i), nil, result("rdma", "node1", "mlx5-0"))
		ic.note(c, "node1", refused)
	}
	for i := range maxInvalidConfigs + 10 {
		note(i)
	}
	note(3) // noted again: the newest
	got := ic.statuses()
	if len(got) != maxInvalidConfigs {
		t.Fatalf("%d kept, want %d", len(got), maxInvalidConfigs)
	}
	for i, want := range map[int]bool{0: false, 3: true, 9: false, 10: false, 11: true, maxInvalidConfigs + 9: true} {
		if _, ok := got[claimRef{Namespace: "default", Name: fmt.Sprintf("c-%d", i)}]; ok != want {
			t.Errorf("claim %d kept %t, want %t", i, ok, want)
		}
	}
	ic.note(configured("x", nil, result("rdma", "node2", "mlx5-0")), "node1", refused)
	if _, ok := ic.statuses()[claimRef{Namespace: "default", Name: "c-x"}]; ok {
		t.Error("kept a claim without a device of this pool")
	}
}

// TestStatusOfInvalidConfig checks that a refused configuration shows on
// the claim's device, written without a change of the records, kept by
// the passes the records drive, replaced by a record of a successful
// attach, and cleared once the driver forgets it.
func TestStatusOfInvalidConfig(t *testing.T) {
	c1 := allocatedClaim("team", "c1", "mlx5-0")
	c1.UID = types.UID("uid-c1")
	e := newStatusEnv(t, c1)
	var ic invalidConfigs
	e.w.InvalidConfigs = ic.statuses
	moved := false
	e.w.Changed = func() bool { return moved }
	reason := func(when string) string {
		t.Helper()
		d, ok := e.entries(t, "team", "c1")[DriverName+"/mlx5-0"]
		if !ok {
			return ""
		}
		c := readyOf(t, d)
		if c.Status != metav1.ConditionFalse && c.Reason != ReasonAttached {
			t.Fatalf("%s: %+v", when, c)
		}
		if c.Reason == ReasonInvalidConfig && !strings.Contains(c.Message, `field "ifName"`) {
			t.Fatalf("%s: message %q", when, c.Message)
		}
		return c.Reason
	}

	e.sync(t)
	ic.note(c1, testPool, &configError{errors.New(`claim team/c1: field "ifName": "a/b" is not an interface name`)})
	e.sync(t)
	if r := reason("refused"); r != ReasonInvalidConfig {
		t.Fatalf("refused: reason %q", r)
	}
	for range resyncEvery + 1 {
		e.sync(t)
	}
	if r := reason("after a full pass"); r != ReasonInvalidConfig {
		t.Fatalf("after a full pass: reason %q", r)
	}

	moved = true
	e.recs = []*state.Record{record("s1", "team", "trainer", "c1", "mlx5_0", "mlx5-0", state.StepDone, t0)}
	e.sync(t)
	if r := reason("attached"); r != ReasonAttached {
		t.Fatalf("attached: reason %q", r)
	}
	e.recs = nil
	e.sync(t)
	if r := reason("detached"); r != ReasonInvalidConfig {
		t.Fatalf("detached, still refused: reason %q", r)
	}

	moved = false
	ic.drop(c1.UID)
	e.sync(t)
	if r := reason("forgotten"); r != "" {
		t.Fatalf("forgotten: reason %q, want the entry cleared", r)
	}
	if got := e.entries(t, "team", "c1"); len(got) != 1 {
		t.Fatalf("entries %v, want only the other driver's", got)
	}
}
