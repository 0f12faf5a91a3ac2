package reconcile

import (
	"cmp"

	"github.com/rdma-chain/rdma-chain/pkg/metrics"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// releaseEarlierBoot releases, through the plugin's DEL, every attachment
// made in an earlier boot (state.BootEarlier): its pod died in the reboot,
// and what it held in the kernel with it. The daemon runs it once at
// start, which is its first pass after a boot, before it holds the SMC
// socket hook again: DEL then gives back only the leases, device-info
// files and records. Records of unknown boot (none recorded) are left to
// the passes, which tell their pods' death by CRI or by netns. It says
// how many it released, and returns that and the number of problems.
func (r *reconciler) releaseEarlierBoot() (released, problems int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	boot, err := state.ReadBootID(cmp.Or(r.bootIDPath, state.BootIDFile))
	if err != nil {
		r.log.Warn("cannot read the kernel's boot id: the attachments of pods that died in a reboot wait for the passes", "error", err)
		return 0, 1
	}
	for _, n := range r.networks() {
		recs, err := state.New(n.DataDir).List()
		if err != nil {
			r.log.Error("cannot list the attachments", "dataDir", n.DataDir, "error", err)
			problems++
		}
		for _, rec := range recs {
			if rec.Network != n.Name || rec.BootOf(boot) != state.BootEarlier {
				continue
			}
			if r.release(n, rec, "made in an earlier boot ("+rec.BootID+"): its pod died in the reboot", metrics.ReasonEarlierBoot) {
				released++
			} else {
				problems++
			}
		}
	}
	r.log.Info("released the attachments of an earlier boot", "released", released, "problems", problems, "bootId", boot)
	return released, problems
}
