package smc

import (
	"errors"
	"fmt"
)

// EnsurePnet makes e present in this netns's table and returns the entry
// that is in effect.
//
// It sends ADD; on EEXIST it dumps the table and looks for an entry with the
// same EthName (or the same IBName and IBPort):
//   - same PNETID: nil;
//   - another PNETID: that entry and a *ConflictError (errors.Is ErrExists).
//     For an IB port the caller may adopt the existing PNETID.
//
// The kernel keeps one table row per RDMA device name, yet it applies the
// PNETID to the port before it notices the row and answers EEXIST, so a
// second port of a device (or a port whose PNETID was set some other way)
// shows only in the SMC-R device list: for IB entries EnsurePnet then reads
// the port's PNETID from SMCRDevices. When nothing explains the EEXIST (an
// IB entry outside init_net, a netdev with a hardware PNETID on s390) the
// error wraps ErrExists.
func (c *Client) EnsurePnet(e PnetEntry) (PnetEntry, error) {
	e = e.normalized()
	err := c.PnetAdd(e)
	if !errors.Is(err, ErrExists) {
		return e, err
	}
	existing, found, err := c.findExisting(e)
	if err != nil {
		return PnetEntry{}, err
	}
	if !found {
		return PnetEntry{}, unexplainedExists(e)
	}
	if existing.PnetID != e.PnetID {
		return existing, &ConflictError{Existing: existing}
	}
	return existing, nil
}

// findExisting looks for e's netdev or IB port in the table, then (IB only)
// in the SMC-R device list.
func (c *Client) findExisting(e PnetEntry) (PnetEntry, bool, error) {
	table, err := c.PnetDump()
	if err != nil {
		return PnetEntry{}, false, err
	}
	if got, ok := findTarget(table, e); ok {
		return got, true, nil
	}
	if !e.isIB() || c.genID == 0 {
		return PnetEntry{}, false, nil
	}
	devs, err := c.SMCRDevices()
	if err != nil {
		return PnetEntry{}, false, err
	}
	return portEntry(devs, e)
}

// findTarget returns the entry of list that names e's netdev or IB port.
func findTarget(list []PnetEntry, e PnetEntry) (PnetEntry, bool) {
	for _, x := range list {
		if e.sameTarget(x) {
			return x, true
		}
	}
	return PnetEntry{}, false
}

// portEntry returns the PNETID an SMC-R device port carries, if any.
func portEntry(devs []SMCRDevice, e PnetEntry) (PnetEntry, bool, error) {
	for _, d := range devs {
		if d.Name == e.IBName && d.Port == int(e.IBPort) && d.PnetID != "" {
			return PnetEntry{PnetID: d.PnetID, IBName: d.Name, IBPort: e.IBPort}, true, nil
		}
	}
	return PnetEntry{}, false, nil
}

// unexplainedExists explains an EEXIST with no entry behind it.
func unexplainedExists(e PnetEntry) error {
	if e.isIB() {
		return fmt.Errorf("add pnet entry %s: the kernel answered EEXIST but no entry carries that port "+
			"(IB entries can only be added in the initial network namespace): %w", e, ErrExists)
	}
	return fmt.Errorf("add pnet entry %s: the kernel answered EEXIST but the table has no entry for the netdev "+
		"(hardware-defined PNETID?): %w", e, ErrExists)
}

// RemovePnet removes e's entry and only that one.
//
// What the kernel does (smc_pnet_remove_by_pnetid): DEL takes only a PNETID
// and removes every table row of that PNETID in the requester's netns - ETH
// rows and, in init_net, IB rows. In init_net it also clears that PNETID
// from every RDMA device port whose PNETID was set by the user, whether or
// not a row exists. It answers ENOENT when nothing matched. A pod netns
// table is flushed by the kernel when the netns exits.
//
// So RemovePnet dumps this netns's table first:
//   - e is not in the table and other rows use its PNETID: nothing is done
//     (e is gone already; those rows are not e's);
//   - no other row uses the PNETID: DEL (ENOENT is success); for an IB entry
//     this also clears a port PNETID left without a row;
//   - other rows use the PNETID: DEL, then the other rows are added back.
//     Between the two they are briefly missing, and port PNETIDs applied
//     without a row of their own (second port of a device) are not restored.
//
// e is checked first: on DEL and GC it comes back from an attachment record.
func (c *Client) RemovePnet(e PnetEntry) error {
	if err := e.validate(); err != nil {
		return fmt.Errorf("remove pnet entry: %w", err)
	}
	e = e.normalized()
	table, err := c.PnetDump()
	if err != nil {
		return err
	}
	present, others := splitByTarget(table, e)
	if !present && len(others) > 0 {
		return nil
	}
	if err := c.PnetDel(e.PnetID); err != nil {
		return err
	}
	return c.readd(others)
}

// splitByTarget reports whether e is in list and which other rows share its
// PNETID.
func splitByTarget(list []PnetEntry, e PnetEntry) (bool, []PnetEntry) {
	present := false
	var others []PnetEntry
	for _, x := range list {
		switch {
		case x.PnetID != e.PnetID:
		case e.sameTarget(x):
			present = true
		default:
			others = append(others, x)
		}
	}
	return present, others
}

// readd restores rows removed as a side effect of DEL.
func (c *Client) readd(rows []PnetEntry) error {
	var errs []error
	for _, r := range rows {
		if err := c.PnetAdd(r); err != nil && !errors.Is(err, ErrExists) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("restore the pnet entries that shared the deleted PNETID: %w", errors.Join(errs...))
	}
	return nil
}
