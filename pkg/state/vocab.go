package state

// LinkKind is what a link of a record is in the pod: the netdev itself,
// moved (exclusive mode), or a child of it (shared mode), or nothing but
// the RDMA device (shared mode, sharedLink.type none). Its values are the
// record's JSON and, for a child, the kernel's link kind (IFLA_INFO_KIND).
type LinkKind string

const (
	LinkMoved   LinkKind = "moved"   // exclusive: the netdev and RDMA device moved into the pod
	LinkIPVlan  LinkKind = "ipvlan"  // shared: an ipvlan child of the netdev in the pod
	LinkMACVlan LinkKind = "macvlan" // shared: a macvlan child of the netdev in the pod
	LinkNone    LinkKind = "none"    // shared: no netdev in the pod, the RDMA device only
)

// Step is a link's progress marker, recorded before and after each host
// change so that DEL after a crash anywhere gives back exactly what was
// taken.
type Step string

const (
	StepPlanned      Step = "planned"       // recorded, nothing changed yet
	StepNetdevMoving Step = "netdev-moving" // exclusive: host identity recorded, move under way
	StepNetdevMoved  Step = "netdev-moved"  // exclusive: netdev is in the pod
	StepChildAdding  Step = "child-adding"  // shared: child being created
	StepDone         Step = "done"          // attached
	// StepReleased means the host side is given back while the link's IPAM
	// lease is still to be released; it holds no device any more.
	StepReleased Step = "host-released"
)

// ModeName is the record's mode as inspect, the metrics and the logs name
// it: the RDMA netns mode, or pass-through for a record without one.
func (r *Record) ModeName() string {
	if r.Mode == "" {
		return "pass-through"
	}
	return string(r.Mode)
}
