// Package linux is the netlink data plane: it makes one network namespace match a
// backend.State. Prepare creates or adopts the VXLAN device; Apply converges the device's
// addresses, the nexthop objects and routes to peers' subnets, and the neighbour and FDB
// entries of the VXLAN device. Either way Apply makes a plan, the entries to set and to
// delete: in full from the diff of a dump against the State, or, for the peers that changed,
// from the plane's model of what it programmed before and after, with no dump. One writer
// executes every plan in one order (additions before what relies on them, deletions after),
// so no peer is unreachable in between. Watch reports only the kernel changes that model did
// not expect. It never touches entries the daemon does not own (see Ownership). The
// translation, the diff, the model and the plan are pure and portable; only the netlink code
// is Linux-only.
package linux
