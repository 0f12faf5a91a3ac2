package chain

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

const (
	bootA = "9f5defee-91a3-4099-b60f-178d4c2a437b"
	bootB = "0c4e2a57-51d7-4a8c-9d0e-4d1b7c1a9e11"
)

// boot makes id the running kernel's boot id for w's plugin.
func (w *world) boot(t *testing.T, id string) {
	t.Helper()
	if w.bootIDPath == "" {
		w.bootIDPath = filepath.Join(t.TempDir(), "boot_id")
	}
	if err := os.WriteFile(w.bootIDPath, []byte(id+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// smcrMacvlan returns an SMC-R pod listed in the socket hook, with a
// macvlan child and an IPAM lease.
const smcrMacvlan = `,"sharedLink":{"type":"macvlan"}` + withIPAM +
	`,"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"true"}}` +
	`,"smcr":{"transparent":"bpf","onUnsupported":"fail"}`

// TestAddRecordsBoot checks that ADD records the boot it runs in.
func TestAddRecordsBoot(t *testing.T) {
	w, dir := erdmaWorld(t), t.TempDir()
	w.boot(t, bootA)
	addPod(t, w, dir, "c1", smcrMacvlan)
	rec, err := state.New(dir).Get(state.Key{Network: "rdmanet", ContainerID: "c1", IfName: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.BootID != bootA {
		t.Errorf("recorded boot %q, want %q", rec.BootID, bootA)
	}
}

// TestDelOfEarlierBoot checks that the DEL of an attachment made in an
// earlier boot gives back its lease, its device-info file and its
// record, and nothing of the kernel: the hook key, the pnet rows and the
// child died with that boot, and this boot's pods may have their numbers
// (here a pod of this boot lists the same netns inode and wrote the same
// init_net entry), nor looks its child up by the nsid it recorded.
func TestDelOfEarlierBoot(t *testing.T) {
	w, dir := erdmaWorld(t), t.TempDir()
	w.childNsid = true
	w.boot(t, bootA)
	addPod(t, w, dir, "c1", smcrMacvlan)
	rec, err := state.New(dir).Get(state.Key{Network: "rdmanet", ContainerID: "c1", IfName: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.SMC == nil || rec.SMC.Transparent != "bpf" || len(rec.Links) != 1 || !rec.Links[0].IPAM {
		t.Fatalf("ADD recorded %+v (SMC %+v)", rec, rec.SMC)
	}

	// The reboot: the netns is gone, the tables are this boot's.
	w.boot(t, bootB)
	w.gone = map[string]bool{"/var/run/netns/pod": true}
	w.hooked = map[uint64]bool{rec.NetNSIno: true}
	w.pnet = map[string][]smc.PnetEntry{"": {hostEntry}}
	mark := len(w.calls)
	delPod(t, w, dir, "c1", smcrMacvlan)

	calls := w.calls[mark:]
	for _, verb := range []string{"HookRemove", "RemovePnet", "DelChild", "ReturnToHost", "RestoreToHost", "EnsurePnet"} {
		if got := filterCalls(calls, verb); len(got) != 0 {
			t.Errorf("DEL of an earlier boot's attachment touched the kernel: %v", got)
		}
	}
	if got := filterCalls(calls, "IPAMDel"); len(got) != 1 {
		t.Errorf("lease releases %v, want one", got)
	}
	if !w.hooked[rec.NetNSIno] || !reflect.DeepEqual(w.pnet[""], []smc.PnetEntry{hostEntry}) {
		t.Errorf("this boot's hook %v or pnet rows %v changed", w.hooked, w.pnet)
	}
	if files := stateFiles(t, dir); len(files) != 0 {
		t.Errorf("records left: %v", files)
	}
	if !strings.Contains(w.stderr.String(), "attachment of an earlier boot") {
		t.Errorf("DEL did not say the attachment is of an earlier boot; log:\n%s", w.stderr.String())
	}
}

// TestAddAfterRebootWritesHostPnet checks that, after a reboot, the first
// SMC-R pod writes the init_net pnet entry and owns it: the earlier boot's
// attachments held an entry that died with it.
func TestAddAfterRebootWritesHostPnet(t *testing.T) {
	w, dir := erdmaWorld(t), t.TempDir()
	w.boot(t, bootA)
	addPod(t, w, dir, "c1", smcrMacvlan)

	w.boot(t, bootB)
	w.cookieBump = map[string]uint64{"/var/run/netns/pod": 1} // this boot's netns at the path
	w.hooked, w.pnet = nil, nil
	addPod(t, w, dir, "c2", smcrMacvlan)
	if !reflect.DeepEqual(w.pnet[""], []smc.PnetEntry{hostEntry}) {
		t.Fatalf("init_net pnet table %v after this boot's first SMC-R ADD, want %v", w.pnet[""], hostEntry)
	}
	rec, err := state.New(dir).Get(state.Key{Network: "rdmanet", ContainerID: "c2", IfName: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.SMC == nil || !rec.SMC.HostOwned {
		t.Errorf("the pod that wrote the entry does not own it: %+v", rec.SMC)
	}
	delPod(t, w, dir, "c1", smcrMacvlan)
	delPod(t, w, dir, "c2", smcrMacvlan)
	if len(w.pnet[""]) != 0 || len(w.hooked) != 0 {
		t.Errorf("the last DEL left pnet %v, hook %v", w.pnet, w.hooked)
	}
}

// TestDelOfUnknownBootRemovesHostPnet checks that the DEL of the last
// SMC-R attachment recorded before boot ids were (a record of the
// previous release, whose boot is unknown) removes the init_net entry
// it owns once its netns is gone, as it would have: the entry stays
// only while another live attachment holds it.
func TestDelOfUnknownBootRemovesHostPnet(t *testing.T) {
	w, dir := erdmaWorld(t), t.TempDir()
	w.boot(t, bootA)
	addPod(t, w, dir, "c1", smcrMacvlan)
	st := state.New(dir)
	key := state.Key{Network: "rdmanet", ContainerID: "c1", IfName: "eth0"}
	rec, err := st.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.SMC == nil || !rec.SMC.HostOwned {
		t.Fatalf("ADD recorded SMC %+v, want the init_net entry owned", rec.SMC)
	}
	rec.BootID = "" // as the previous release wrote it
	if err := st.Put(rec); err != nil {
		t.Fatal(err)
	}
	w.gone = map[string]bool{"/var/run/netns/pod": true}
	mark := len(w.calls)
	delPod(t, w, dir, "c1", smcrMacvlan)
	if got := filterCalls(w.calls[mark:], "RemovePnet"); len(got) != 1 || !strings.HasPrefix(got[0], `RemovePnet ""`) {
		t.Errorf("init_net entry removals %v, want the one the attachment owned", got)
	}
	if left := w.pnet[""]; len(left) != 0 {
		t.Errorf("init_net pnet table %v after the last SMC-R attachment's DEL, want empty", left)
	}
}
