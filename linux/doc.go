// Package linux is the netlink data plane: it makes one network namespace match a
// backend.State. Prepare creates or adopts the VXLAN device; Apply converges the device's
// addresses, the nexthop objects and routes to peers' subnets, and the neighbour and FDB
// entries of the VXLAN device: in full (dump, diff, write what differs) or, for the peers that
// changed, from a model of what it programmed, with no dump. Watch reports only the kernel
// changes that model did not expect. It never touches entries the daemon does not own (see
// Ownership). The translation and the diff are pure and portable; only the netlink code is
// Linux-only.
package linux
