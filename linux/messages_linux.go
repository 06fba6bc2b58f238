package linux

import (
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/backend"
)

// The requests the plane writes, in the kernel's own layout (rtnetlink(7), and
// include/uapi/linux/nexthop.h for nexthop objects, which the netlink library lacks).

const createReplace = unix.NLM_F_CREATE | unix.NLM_F_REPLACE

// rtmsg is struct rtmsg.
func rtmsg(family, dstLen, tos, table, protocol, scope, typ uint8, flags uint32) []byte {
	return native.AppendUint32([]byte{family, dstLen, 0, tos, table, protocol, scope, typ}, flags)
}

// routeSet replaces the route to r.Dst (default metric, main table) with r, through its
// nexthop object when it has one.
func routeSet(r Route, link int) message {
	scope, flags := uint8(unix.RT_SCOPE_UNIVERSE), uint32(0)
	if !r.Gw.IsValid() && r.NH == 0 {
		scope = unix.RT_SCOPE_LINK // as ip-route gives a device route
	}
	if r.Onlink && r.NH == 0 {
		flags |= unix.RTNH_F_ONLINK
	}
	dst := r.Dst.Masked()
	b := rtmsg(uint8(familyOf(dst.Addr())), uint8(dst.Bits()), 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, scope, unix.RTN_UNICAST, flags)
	b = attr(b, unix.RTA_DST, dst.Addr().AsSlice())
	if r.NH != 0 {
		b = attr(b, rtaNHID, u32(r.NH))
	} else {
		b = attr(b, unix.RTA_OIF, u32(uint32(link)))
		if r.Gw.IsValid() {
			b = attr(b, unix.RTA_GATEWAY, r.Gw.AsSlice())
		}
	}
	return message{typ: unix.RTM_NEWROUTE, flags: createReplace, body: b}
}

// blackholeAdd adds the blackhole route r (default metric, main table). It adds rather than
// replaces: a replace would overwrite whatever route of that metric is there, the CNI
// bridge's own route to the subnet among them; flanneld adds it the same way, and fails the
// same way when the subnet is on a bridge.
func blackholeAdd(r Route) message {
	dst := r.Dst.Masked()
	b := rtmsg(uint8(familyOf(dst.Addr())), uint8(dst.Bits()), 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT,
		unix.RT_SCOPE_UNIVERSE, unix.RTN_BLACKHOLE, 0)
	b = attr(b, unix.RTA_DST, dst.Addr().AsSlice())
	return message{typ: unix.RTM_NEWROUTE, flags: unix.NLM_F_CREATE | unix.NLM_F_EXCL, body: b}
}

// routeDel deletes exactly the dumped route k.
func routeDel(k kernelRoute) message {
	r := k.raw
	dst := k.Dst.Masked()
	b := rtmsg(r.Family, uint8(dst.Bits()), r.Tos, r.Table, r.Protocol, r.Scope, r.Type, 0)
	b = attr(b, unix.RTA_DST, dst.Addr().AsSlice())
	b = attr(b, unix.RTA_TABLE, u32(uint32(r.Table)))
	b = attr(b, unix.RTA_PRIORITY, u32(uint32(k.Metric)))
	if k.NH != 0 {
		b = attr(b, rtaNHID, u32(k.NH))
	} else {
		if r.LinkIndex != 0 {
			b = attr(b, unix.RTA_OIF, u32(uint32(r.LinkIndex)))
		}
		if k.Gw.IsValid() {
			b = attr(b, unix.RTA_GATEWAY, k.Gw.AsSlice())
		}
	}
	return message{typ: unix.RTM_DELROUTE, body: b}
}

// routeDelOwn deletes the route weft programmed as r (main table, default metric, boot).
func routeDelOwn(r Route, link int) message {
	k := kernelRoute{Route: r, Metric: defaultMetric(r.Dst), raw: rawRoute{
		Family: uint8(familyOf(r.Dst.Addr())), Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_BOOT,
		Scope: unix.RT_SCOPE_UNIVERSE, Type: unix.RTN_UNICAST, LinkIndex: int32(link),
	}}
	if !r.Gw.IsValid() && r.NH == 0 {
		k.raw.Scope = unix.RT_SCOPE_LINK
	}
	return routeDel(k)
}

// nhmsg is struct nhmsg; protocol is 0 in a delete or a dump, which the kernel refuses
// otherwise.
func nhmsg(family, protocol uint8, flags uint32) []byte {
	return native.AppendUint32([]byte{family, 0, protocol, 0}, flags)
}

func nexthopSet(n Nexthop, link int) message {
	var flags uint32
	if n.Onlink {
		flags = unix.RTNH_F_ONLINK
	}
	b := nhmsg(uint8(familyOf(n.Gw)), unix.RTPROT_BOOT, flags)
	b = attr(b, unix.NHA_ID, u32(n.ID))
	b = attr(b, unix.NHA_OIF, u32(uint32(link)))
	b = attr(b, unix.NHA_GATEWAY, n.Gw.AsSlice())
	return message{typ: unix.RTM_NEWNEXTHOP, flags: createReplace, body: b}
}

func nexthopDel(id uint32) message {
	return message{typ: unix.RTM_DELNEXTHOP, body: attr(nhmsg(unix.AF_UNSPEC, 0, 0), unix.NHA_ID, u32(id))}
}

// ndmsg is struct ndmsg.
func ndmsg(family uint8, link int, state uint16, flags, typ uint8) []byte {
	b := []byte{family, 0, 0, 0}
	b = native.AppendUint32(b, uint32(link))
	b = native.AppendUint16(b, state)
	return append(b, flags, typ)
}

func neighSet(n Neighbor, link int) message {
	b := ndmsg(uint8(familyOf(n.IP)), link, unix.NUD_PERMANENT, 0, unix.RTN_UNICAST)
	b = attr(b, unix.NDA_DST, n.IP.AsSlice())
	b = attr(b, unix.NDA_LLADDR, n.MAC[:])
	return message{typ: unix.RTM_NEWNEIGH, flags: createReplace, body: b}
}

func neighDel(ip netip.Addr, link int) message {
	b := attr(ndmsg(uint8(familyOf(ip)), link, 0, 0, 0), unix.NDA_DST, ip.AsSlice())
	return message{typ: unix.RTM_DELNEIGH, body: b}
}

// fdbSet replaces the destination of f.MAC on the device (bridge fdb replace ... self
// permanent).
func fdbSet(f FDBEntry, link int) message {
	b := ndmsg(unix.AF_BRIDGE, link, unix.NUD_PERMANENT, unix.NTF_SELF, 0)
	b = attr(b, unix.NDA_LLADDR, f.MAC[:])
	b = attr(b, unix.NDA_DST, f.Dst.AsSlice())
	return message{typ: unix.RTM_NEWNEIGH, flags: createReplace, body: b}
}

func fdbDel(f FDBEntry, link int) message {
	b := ndmsg(unix.AF_BRIDGE, link, 0, unix.NTF_SELF, 0)
	b = attr(b, unix.NDA_LLADDR, f.MAC[:])
	if f.Dst.IsValid() {
		b = attr(b, unix.NDA_DST, f.Dst.AsSlice())
	}
	return message{typ: unix.RTM_DELNEIGH, body: b}
}

// parseRoute reads an RTM_NEWROUTE of a dump; ok is false for other tables than main.
func parseRoute(body []byte, names map[int]string) (kernelRoute, bool) {
	if len(body) < unix.SizeofRtMsg {
		return kernelRoute{}, false
	}
	family, dstLen, tos, proto, scope, typ := body[0], body[1], body[3], body[5], body[6], body[7]
	table := uint32(body[4])
	flags := native.Uint32(body[8:12])
	dst := netip.IPv4Unspecified()
	if family == unix.AF_INET6 {
		dst = netip.IPv6Unspecified()
	}
	k := kernelRoute{ProtoKernel: proto == unix.RTPROT_KERNEL,
		raw: rawRoute{Family: family, Tos: tos, Table: unix.RT_TABLE_MAIN, Protocol: proto, Scope: scope, Type: typ}}
	multipath := false
	eachAttr(body, unix.SizeofRtMsg, func(t uint16, v []byte) {
		switch {
		case t == unix.RTA_TABLE && len(v) == 4:
			table = native.Uint32(v)
		case t == unix.RTA_DST:
			dst = addrFrom(v)
		case t == unix.RTA_GATEWAY:
			k.Gw = addrFrom(v)
		case t == unix.RTA_PRIORITY && len(v) == 4:
			k.Metric = int(native.Uint32(v))
		case t == rtaNHID && len(v) == 4:
			k.NH = native.Uint32(v)
		case t == unix.RTA_OIF && len(v) == 4:
			k.raw.LinkIndex = int32(native.Uint32(v))
		case t == unix.RTA_MULTIPATH:
			multipath = true
		}
	})
	if table != unix.RT_TABLE_MAIN {
		return kernelRoute{}, false
	}
	k.Dst = netip.PrefixFrom(dst, int(dstLen))
	k.Onlink = flags&unix.RTNH_F_ONLINK != 0
	if typ == unix.RTN_UNICAST && !multipath {
		k.Dev = names[int(k.raw.LinkIndex)]
	}
	k.Blackhole = typ == unix.RTN_BLACKHOLE
	return k, true
}

// parseNexthop reads an RTM_NEWNEXTHOP of a dump.
func parseNexthop(body []byte, names map[int]string) (kernelNexthop, bool) {
	if len(body) < 8 {
		return kernelNexthop{}, false
	}
	n := kernelNexthop{Nexthop: Nexthop{Onlink: native.Uint32(body[4:8])&unix.RTNH_F_ONLINK != 0}}
	hasID := false
	eachAttr(body, 8, func(t uint16, v []byte) {
		switch {
		case t == unix.NHA_ID && len(v) == 4:
			n.ID, hasID = native.Uint32(v), true
		case t == unix.NHA_GATEWAY:
			n.Gw = addrFrom(v)
		case t == unix.NHA_OIF && len(v) == 4:
			n.Dev = names[int(native.Uint32(v))]
		case t == unix.NHA_GROUP, t == unix.NHA_BLACKHOLE:
			n.Other = true
		}
	})
	return n, hasID
}

// dumpedNeigh is an RTM_NEWNEIGH of a dump: a neighbour (ARP, NDP) or, in the bridge family,
// an FDB entry, whose IP is its remote destination.
type dumpedNeigh struct {
	family uint8
	link   int
	state  uint16
	ip     netip.Addr // invalid when the entry has none
	mac    backend.MAC
}

// parseNeigh reads an RTM_NEWNEIGH of a dump.
func parseNeigh(body []byte) (dumpedNeigh, bool) {
	if len(body) < unix.SizeofNdMsg {
		return dumpedNeigh{}, false
	}
	n := dumpedNeigh{family: body[0], link: int(int32(native.Uint32(body[4:8]))), state: native.Uint16(body[8:10])}
	eachAttr(body, unix.SizeofNdMsg, func(t uint16, v []byte) {
		switch {
		case t == unix.NDA_DST:
			n.ip = addrFrom(v)
		case t == unix.NDA_LLADDR && len(v) == len(n.mac):
			copy(n.mac[:], v)
		}
	})
	return n, true
}
