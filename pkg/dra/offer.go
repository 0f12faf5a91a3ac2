package dra

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// Offer is which RDMA devices the node's rdma-chain entries let the plugin
// attach: their `devices` lists (docs/configuration.md), and the NICs
// their `podSoftRoCE` give pods soft-RoCE devices on. The driver
// publishes only those, so the scheduler never allocates a device whose
// ADD the plugin refuses ("matches no RDMA device offered on this node"):
// such a pod would never start.
type Offer struct {
	All   bool            // an entry without a devices list (nor podSoftRoCE) offers every device
	Names map[string]bool // RDMA device or netdev names
	From  string          // where the offer was read, or why nothing is offered
	// SoftRoCE names the NICs (netdevs) of the podSoftRoCE entries: each
	// pod gets an rxe device of its own on a child of one, made at its ADD,
	// so such an entry offers the NIC and no RDMA device of the node.
	SoftRoCE map[string]bool
	// NodeAddrs are the entries' nodeAddresses: in exclusive mode the
	// plugin never moves a netdev holding one, nor one carrying the node's
	// default route, so such a device is not published then.
	NodeAddrs []netip.Addr
	Entries   int // the rdma-chain entries read: none, and nothing is offered
}

func (o Offer) offers(dev rdma.Device) bool {
	return o.All || o.Names[dev.Name] || (dev.Netdev != "" && o.Names[dev.Netdev])
}

// OfferOfConfDir reads the offer of the rdma-chain entries in the
// conflists of dir, as the plugin reads its entry's devices. With no entry
// (the plugin is not installed yet, or its conflist is unreadable) nothing
// is offered: a device published then would be one no pod could start with.
func OfferOfConfDir(dir string) Offer {
	nets, _, err := conflist.Discover(dir)
	if err != nil {
		return Offer{From: err.Error()}
	}
	o := Offer{Names: map[string]bool{}, SoftRoCE: map[string]bool{}}
	var paths []string
	for _, n := range nets {
		conf, _, err := config.Parse(n.Stdin)
		if err != nil {
			continue // Discover parsed it: not reached
		}
		paths = append(paths, n.Path)
		o.Entries++
		if conf.PodSoftRoCE != "" {
			o.SoftRoCE[conf.PodSoftRoCE] = true // its devices list is empty (pkg/config)
		} else {
			o.All = o.All || len(conf.Devices) == 0
		}
		for _, d := range conf.Devices {
			o.Names[d] = true
		}
		for _, a := range conf.NodeAddrs() {
			if !slices.Contains(o.NodeAddrs, a) {
				o.NodeAddrs = append(o.NodeAddrs, a)
			}
		}
	}
	o.From = fmt.Sprintf("the rdma-chain entries of %s", strings.Join(paths, ", "))
	return o
}

// withoutUplinks takes out of seen, in exclusive mode, the NICs on the host
// whose netdev carries the node's own traffic (uplinks maps a netdev name
// to what it carries), into skipped with why. The plugin refuses to move
// them (CNI error 110), so a pod allocated one would never start. A NIC a pod holds
// is not on the host and stays.
func withoutUplinks(seen map[string]NIC, uplinks map[string]string, skipped map[string]string) {
	for name, n := range seen {
		if what := uplinks[n.Netdev]; !n.InPod && n.Netdev != "" && what != "" {
			delete(seen, name)
			skipped[name] = "exclusive mode: its netdev " + n.Netdev + " carries " + what + ", which the plugin never moves into a pod"
		}
	}
}

// withoutUnoffered takes out of seen the NICs offer does not offer, into
// skipped with why.
func withoutUnoffered(seen map[string]NIC, offer Offer, skipped map[string]string) {
	for name, n := range seen {
		if !offer.offers(n.Device) {
			delete(seen, name)
			skipped[name] = "not in the devices list of " + offer.From
		}
	}
}

// offer reads the offer. One without any rdma-chain entry, within
// OfferGrace of the last read that had one, is that last read's instead:
// a conflist rewritten in place, or the node component putting its entry
// back, would otherwise empty the slice, and the scheduler would allocate
// nothing of the node meanwhile. Past the grace the loss is published.
func (d *Discoverer) offer() Offer {
	if d.Offer == nil {
		return Offer{All: true}
	}
	o, now := d.Offer(), d.now()
	if o.Entries > 0 || d.OfferGrace <= 0 {
		if d.offerLostAt != nil && o.Entries > 0 {
			d.log().Info("the rdma-chain entries are back", "offer", o.From)
		}
		d.lastOffer, d.offerLostAt = o, nil
		return o
	}
	if d.lastOffer.Entries == 0 {
		return o // never had one: nothing to keep
	}
	if d.offerLostAt == nil {
		d.offerLostAt = &now
		d.log().Warn("no rdma-chain entry in the conflists: the last offer stays published for the grace period",
			"why", o.From, "kept", d.lastOffer.From, "grace", d.OfferGrace)
	}
	if now.Sub(*d.offerLostAt) < d.OfferGrace {
		return d.lastOffer
	}
	d.log().Warn("no rdma-chain entry in the conflists past the grace period: their devices are no longer published",
		"why", o.From, "since", d.offerLostAt.UTC())
	d.lastOffer = Offer{}
	return o
}

func (d *Discoverer) now() time.Time {
	if d.Now == nil {
		return time.Now()
	}
	return d.Now()
}

func (d *Discoverer) log() *slog.Logger {
	if d.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return d.Log
}
