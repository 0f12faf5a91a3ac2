package chain

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/podres"
)

// A lookup or probe kubelet answered is noted in the state directory, and
// STATUS does not ask kubelet again while the note is younger than
// kubeletAnsweredMaxAge (it only checks that the socket is served): the
// runtime sends STATUS every 5 s, and each probe spends a token of
// kubelet's pod-resources rate limit that the ADDs of a node starting many
// pods need. The note names the socket: one for another socket is absent.
const (
	kubeletAnsweredCache  = "cache-kubelet-answered.json"
	kubeletAnsweredMaxAge = 30 * time.Second
)

type kubeletAnswered struct {
	Socket string `json:"socket"`
}

// kubeletAnsweredWithin reports whether a note younger than maxAge says
// that kubelet at the conf's socket answered. A note that is not exactly
// one such JSON object is absent.
func kubeletAnsweredWithin(c *call, maxAge time.Duration) bool {
	b, ok := c.store.ReadCache(kubeletAnsweredCache, maxAge)
	if !ok {
		return false
	}
	var a kubeletAnswered
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if d.Decode(&a) != nil {
		return false
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return false
	}
	return a.Socket == c.conf.PodResourcesSocket
}

// noteKubeletAnswered writes the note after kubelet answered, unless one
// younger than half its life is there (an ADD then costs a read, not a
// write). A note that cannot be written only costs STATUS a probe.
func noteKubeletAnswered(c *call) {
	if kubeletAnsweredWithin(c, kubeletAnsweredMaxAge/2) {
		return
	}
	b, err := json.Marshal(kubeletAnswered{Socket: c.conf.PodResourcesSocket})
	if err == nil {
		err = c.store.WriteCache(kubeletAnsweredCache, b)
	}
	if err != nil {
		c.log.Debug("cannot note that kubelet answered", "error", err)
	}
}

// kubeletUnansweredMessage is ADD's error 11 when kubelet gave no answer
// within the lookup's budget, naming the rate limit when that refused it.
func kubeletUnansweredMessage(socket string, err error) string {
	if errors.Is(err, podres.ErrRateLimited) {
		return "kubelet pod-resources API at " + socket + " kept refusing the lookup with its rate limit (ResourceExhausted) for " +
			podres.LookupBudget.String()
	}
	return "kubelet pod-resources API at " + socket + " did not answer"
}
