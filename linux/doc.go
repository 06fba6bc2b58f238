// Package linux is the netlink data plane: it makes one network namespace match a
// backend.State. It creates or adopts the VXLAN device, and converges the device's addresses,
// the routes to peers' subnets, the neighbour and FDB entries of the VXLAN device, writing only
// what differs and never touching entries the daemon does not own (see Ownership). The diff
// itself is pure and portable; only the netlink code is Linux-only.
package linux
