package rdmares

import (
	"fmt"

	cnins "github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
)

// Dump reads every kind of tracked object of every RDMA device the netns
// at nsPath sees ("": the calling thread's). In the RDMA subsystem's
// exclusive mode a device is seen only in the netns that holds it; in
// shared mode every netns sees every device. A netns path is entered on a
// locked OS thread, so the sockets the dumps open live there.
func Dump(nsPath string) ([]Entry, error) {
	if nsPath == "" {
		return dumpHere()
	}
	var out []Entry
	err := cnins.WithNetNSPath(nsPath, func(cnins.NetNS) (err error) {
		out, err = dumpHere()
		return err
	})
	return out, err
}

// dumpHere dumps the devices of the calling thread's netns.
func dumpHere() ([]Entry, error) {
	devs, err := nldump.RdmaLinkList(nil)
	if err != nil {
		return nil, fmt.Errorf("list RDMA devices: %w", err)
	}
	var out []Entry
	for _, d := range devs {
		for _, k := range Kinds {
			es, err := nldump.Retry(func() ([]Entry, error) { return dumpKind(k, d.Attrs.Index) })
			if err != nil {
				return nil, fmt.Errorf("dump %s of RDMA device %s: %w", k, d.Attrs.Name, err)
			}
			out = append(out, es...)
		}
	}
	return out, nil
}

// dumpKind sends one RES dump of kind for device dev and parses every
// message of the reply. An interrupted dump's error wraps
// nl.ErrDumpInterrupted, which nldump.Retry retries.
func dumpKind(k Kind, dev uint32) ([]Entry, error) {
	proto := nl.RDMA_NL_NLDEV<<nl.RDMA_NL_GET_CLIENT_SHIFT | int(attrsOf[k].cmd)
	req := nl.NewNetlinkRequest(proto, unix.NLM_F_DUMP)
	req.AddData(nl.NewRtAttr(attrDevIndex, nl.Uint32Attr(dev)))
	msgs, err := req.Execute(unix.NETLINK_RDMA, 0)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, m := range msgs {
		es, err := ParseReply(k, dev, m)
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
	}
	return out, nil
}
