package config

// validateSoftRoCE checks podSoftRoCE: a netdev name, served only by
// macvlan children in bridge mode in shared mode. An ipvlan child has its
// parent's MAC, so every pod's rxe device would share one node GUID and
// link-local GID: measured on Linux 7.3, rping between two such pods fails
// and an rxe device outlived its netns. With sharedLink none there is no
// child to put the device on; devices would name RDMA devices the pods do
// not get.
func (c *NetConf) validateSoftRoCE() error {
	if c.PodSoftRoCE == "" {
		return nil
	}
	if !devNameRE.MatchString(c.PodSoftRoCE) {
		return invalid("podSoftRoCE", "%q is not a netdev name", truncate(c.PodSoftRoCE))
	}
	switch {
	case c.Mode == ModeExclusive:
		return invalid("podSoftRoCE", "needs the shared RDMA netns mode: an rxe device made inside a netns in exclusive mode cannot open its port")
	case c.SharedLink.Type != LinkMACVlan:
		return invalid("sharedLink.type", "must be macvlan with podSoftRoCE, got %s: an ipvlan child has its parent's MAC, "+
			"so the pods' rxe devices would share one node GUID and link-local GID and RoCE between them fails", c.SharedLink.Type)
	case c.SharedLink.Mode != "bridge":
		return invalid("sharedLink.mode", "must be bridge with podSoftRoCE, got %s: pods on one node reach each other through the parent", c.SharedLink.Mode)
	case len(c.Devices) > 0:
		return invalid("devices", "must be empty with podSoftRoCE: each pod gets an rxe device of its own on a child of %s", c.PodSoftRoCE)
	}
	return nil
}
