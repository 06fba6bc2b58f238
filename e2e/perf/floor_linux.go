package perf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/backend"
)

// The kernel's floor of a cold start is what writing a VXLAN node's entries for n peers costs
// the kernel alone: no datastore, no decoding, no diff. It is measured as the daemons are:
// with the harness's route watch (routeWatch) subscribed to the namespace, for the kernel
// makes a notification of every route for its listeners, under the lock the writes take,
// and the watch's goroutines take their share of the CPU (at 20,000 peers the routes took
// the kernel 43 to 52 ms alone, 88 to 91 ms with the watch). A minimal writer puts into a fresh
// network namespace, holding only an underlay and the VXLAN device, the entries weftd writes
// for each peer, in weftd's order: an FDB entry for its VTEP MAC, a neighbour for its VTEP
// address, a nexthop object and a route through it (on a kernel without nexthop objects, a
// route via the VTEP address, onlink). Each kind goes in as few sends as the socket takes: a
// send holds as many requests as its buffer allows, and only the last asks for an
// acknowledgement, so that a send costs one system call and one answer.

// floorSockBuf is the netlink socket's send and receive buffer (SO_SNDBUFFORCE): room for
// one kind of entry for 65,536 peers in one send.
const floorSockBuf = 64 << 20

// rtaNHID is RTA_NH_ID, the nexthop object of a route, which golang.org/x/sys lacks.
const rtaNHID = 30

// floorOwn is the VXLAN device's own address, a node's under test: above the peers' subnets.
func floorOwn() netip.Prefix { return netip.MustParsePrefix("10.255.255.0/32") }

// floor is what a floor measure found.
type floor struct {
	took time.Duration // from the first send to the last acknowledgement
	// each is how long each kind took, in the order of the writes: FDB, neighbours,
	// nexthops, routes.
	each     [4]time.Duration
	sends    int
	nexthops bool // the routes went through nexthop objects
	// device is how long the VXLAN device took to make, address and bring up, before the
	// writes (not in took): a cold start after the device was deleted pays it too.
	device time.Duration
}

// request is one netlink request: its type and flags beyond NLM_F_REQUEST, and its body.
type request struct {
	typ, flags uint16
	body       []byte
}

// kernelFloor measures the floor for peers 1..n in a network namespace of its own, made and
// destroyed here, watched as the daemons' namespace is.
func kernelFloor(n int, log *slog.Logger) (floor, error) {
	ns, fd, err := floorNamespace()
	if err != nil {
		return floor{}, err
	}
	defer ns.Close()
	defer unix.Close(fd)
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return floor{}, fmt.Errorf("kernel floor: netlink handle: %w", err)
	}
	defer h.Close()
	vx, device, err := floorDevices(h)
	if err != nil {
		return floor{}, err
	}
	// Deleted here rather than with the namespace, which the kernel destroys in the
	// background: tearing down a device of tens of thousands of FDB entries holds the lock
	// every netlink write takes, for seconds, and the next measure would wait for it.
	defer func() {
		if l, err := h.LinkByIndex(vx); err == nil {
			_ = h.LinkDel(l)
		}
	}()
	wfd, err := unix.Dup(int(ns))
	if err != nil {
		return floor{}, fmt.Errorf("kernel floor: %w", err)
	}
	watch, err := watchRoutesIn(netns.NsHandle(wfd), network(), log)
	if err != nil {
		return floor{}, fmt.Errorf("kernel floor: %w", err)
	}
	defer watch.Close()
	watch.Expect(peerSet(1, n))
	w := &floorWriter{fd: fd, buf: make([]byte, 1<<16)}

	f := floor{nexthops: true, device: device}
	start := time.Now()
	lap := start
	timed := func(k int, err error) error {
		now := time.Now()
		f.each[k], lap = now.Sub(lap), now
		return err
	}
	if err := timed(0, w.write(n, func(i int) request { return fdbSet(vx, peerMAC(i), peerIP(i)) })); err != nil {
		return floor{}, err
	}
	if err := timed(1, w.write(n, func(i int) request { sn, _ := peer(i); return neighSet(vx, sn.Addr(), peerMAC(i)) })); err != nil {
		return floor{}, err
	}
	if err := timed(2, w.write(n, func(i int) request { sn, _ := peer(i); return nexthopSet(vx, uint32(i), sn.Addr()) })); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) {
			return floor{}, err
		}
		f.nexthops = false
	}
	if err := timed(3, w.write(n, func(i int) request { sn, _ := peer(i); return routeSet(vx, sn, uint32(i), f.nexthops) })); err != nil {
		return floor{}, err
	}
	f.took, f.sends = time.Since(start), w.sends
	// Not timed: the watch's share of the work ends here, not in the next measure.
	if err := seenAll(watch, floorWatchWait); err != nil {
		return floor{}, fmt.Errorf("kernel floor: %w", err)
	}
	return f, floorCheck(h, vx, n)
}

// floorWatchWait bounds how long the floor waits for its watch to see every route written.
const floorWatchWait = 30 * time.Second

// seenAll waits until w has seen every route it expects, for at most wait.
func seenAll(w *routeWatch, wait time.Duration) error {
	timeout := time.After(wait)
	for {
		st := w.Status()
		switch {
		case st.err != nil:
			return fmt.Errorf("route watch: %w", st.err)
		case !st.all.IsZero():
			return nil
		}
		select {
		case <-w.Changed():
		case <-timeout:
			return fmt.Errorf("the route watch saw %d of the %d routes written, after %v", st.have, st.want, wait)
		}
	}
}

// floorCheck counts what the kernel holds after the writes: n routes inside the network, n
// neighbours and n FDB entries on the device.
func floorCheck(h *netlink.Handle, vx, n int) error {
	routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("kernel floor: listing the routes: %w", err)
	}
	nr := 0
	for _, r := range routes {
		if _, ok := clusterRoute(network(), r); ok {
			nr++
		}
	}
	neighs, err := h.NeighList(vx, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("kernel floor: listing the neighbours: %w", err)
	}
	fdb, err := h.NeighList(vx, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("kernel floor: listing the FDB: %w", err)
	}
	nf := 0
	for _, e := range fdb {
		if e.IP != nil && !e.IP.IsUnspecified() {
			nf++
		}
	}
	if nr != n || len(neighs) != n || nf != n {
		return fmt.Errorf("kernel floor: %d routes, %d neighbours, %d FDB entries written for %d peers", nr, len(neighs), nf, n)
	}
	return nil
}

// floorNamespace makes a network namespace and a netlink socket in it, with the buffers of
// floorSockBuf. The calling thread enters the namespace only for that.
func floorNamespace() (netns.NsHandle, int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return 0, 0, fmt.Errorf("kernel floor: the current network namespace: %w", err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		return 0, 0, fmt.Errorf("kernel floor: a new network namespace: %w", err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if serr := netns.Set(orig); serr != nil {
		// The thread stays in the wrong namespace: locked once more, it ends with this
		// goroutine rather than serve another.
		runtime.LockOSThread()
		err = errors.Join(err, serr)
	}
	if err == nil {
		err = errors.Join(unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, floorSockBuf),
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, floorSockBuf),
			unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}))
	}
	if err != nil {
		if fd > 0 {
			unix.Close(fd)
		}
		ns.Close()
		return 0, 0, fmt.Errorf("kernel floor: a netlink socket in a new network namespace: %w", err)
	}
	return ns, fd, nil
}

// floorDevices makes the namespace's underlay (one end of a veth pair, with an address) and the VXLAN
// device over it, as weftd makes it, both up; it returns the device's index and how long the
// VXLAN device took (made, addressed and up).
func floorDevices(h *netlink.Handle) (int, time.Duration, error) {
	under := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "under0"}, PeerName: "under1"}
	if err := h.LinkAdd(under); err != nil {
		return 0, 0, fmt.Errorf("kernel floor: adding the underlay: %w", err)
	}
	uaddr := &net.IPNet{IP: net.IPv4(192, 0, 2, 1), Mask: net.CIDRMask(24, 32)}
	if err := errors.Join(h.AddrAdd(under, &netlink.Addr{IPNet: uaddr}), h.LinkSetUp(under)); err != nil {
		return 0, 0, fmt.Errorf("kernel floor: setting up the underlay: %w", err)
	}
	start := time.Now()
	vx := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: backend.VXLANDeviceName(vni), MTU: 1450},
		VxlanId: vni, VtepDevIndex: under.Index, SrcAddr: uaddr.IP, Port: 8472}
	if err := h.LinkAdd(vx); err != nil {
		return 0, 0, fmt.Errorf("kernel floor: adding the VXLAN device: %w", err)
	}
	own := &net.IPNet{IP: floorOwn().Addr().AsSlice(), Mask: net.CIDRMask(floorOwn().Bits(), 32)}
	if err := errors.Join(h.AddrAdd(vx, &netlink.Addr{IPNet: own}), h.LinkSetUp(vx)); err != nil {
		return 0, 0, fmt.Errorf("kernel floor: setting up the VXLAN device: %w", err)
	}
	return vx.Index, time.Since(start), nil
}

// The requests, in the kernel's layout (rtnetlink(7); include/uapi/linux/nexthop.h).

func nlattr(b []byte, typ uint16, data []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(unix.SizeofRtAttr+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%unix.NLA_ALIGNTO != 0 {
		b = append(b, 0)
	}
	return b
}

func be32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// fdbSet is `bridge fdb replace MAC dev VX dst IP self permanent`.
func fdbSet(vx int, mac backend.MAC, dst netip.Addr) request {
	b := ndmsg(unix.AF_BRIDGE, vx, unix.NTF_SELF, 0)
	b = nlattr(b, unix.NDA_LLADDR, mac[:])
	b = nlattr(b, unix.NDA_DST, dst.AsSlice())
	return request{unix.RTM_NEWNEIGH, unix.NLM_F_CREATE | unix.NLM_F_REPLACE, b}
}

// neighSet is `ip neigh replace IP lladdr MAC dev VX nud permanent`.
func neighSet(vx int, ip netip.Addr, mac backend.MAC) request {
	b := ndmsg(unix.AF_INET, vx, 0, unix.RTN_UNICAST)
	b = nlattr(b, unix.NDA_DST, ip.AsSlice())
	b = nlattr(b, unix.NDA_LLADDR, mac[:])
	return request{unix.RTM_NEWNEIGH, unix.NLM_F_CREATE | unix.NLM_F_REPLACE, b}
}

func ndmsg(family uint8, link int, flags, typ uint8) []byte {
	b := binary.NativeEndian.AppendUint32([]byte{family, 0, 0, 0}, uint32(link))
	b = binary.NativeEndian.AppendUint16(b, unix.NUD_PERMANENT)
	return append(b, flags, typ)
}

// nexthopSet is `ip nexthop replace id ID via GW dev VX onlink`.
func nexthopSet(vx int, id uint32, gw netip.Addr) request {
	b := binary.NativeEndian.AppendUint32([]byte{unix.AF_INET, 0, unix.RTPROT_BOOT, 0}, unix.RTNH_F_ONLINK)
	b = nlattr(b, unix.NHA_ID, be32(id))
	b = nlattr(b, unix.NHA_OIF, be32(uint32(vx)))
	b = nlattr(b, unix.NHA_GATEWAY, gw.AsSlice())
	return request{unix.RTM_NEWNEXTHOP, unix.NLM_F_CREATE | unix.NLM_F_REPLACE, b}
}

// routeSet is `ip route replace SN nhid ID`, or without nexthop objects `ip route replace SN
// via VTEP dev VX onlink`.
func routeSet(vx int, sn netip.Prefix, id uint32, nexthops bool) request {
	var flags uint32
	if !nexthops {
		flags = unix.RTNH_F_ONLINK
	}
	b := binary.NativeEndian.AppendUint32([]byte{unix.AF_INET, uint8(sn.Bits()), 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT,
		unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST}, flags)
	b = nlattr(b, unix.RTA_DST, sn.Addr().AsSlice())
	if nexthops {
		b = nlattr(b, rtaNHID, be32(id))
	} else {
		b = nlattr(b, unix.RTA_OIF, be32(uint32(vx)))
		b = nlattr(b, unix.RTA_GATEWAY, sn.Addr().AsSlice())
	}
	return request{unix.RTM_NEWROUTE, unix.NLM_F_CREATE | unix.NLM_F_REPLACE, b}
}

// floorWriter sends requests in the fewest sends the socket takes.
type floorWriter struct {
	fd    int
	seq   uint32
	sends int
	buf   []byte
}

// write sends the requests of peers 1..n and waits until the kernel has taken them all; the
// first refusal is the error.
func (w *floorWriter) write(n int, req func(i int) request) error { return w.send(1, n, req) }

// send sends the requests of peers from..to in one send, or, when the socket refuses a send
// that large, in two halves.
func (w *floorWriter) send(from, to int, req func(i int) request) error {
	var b []byte
	first := w.seq + 1
	for i := from; i <= to; i++ {
		w.seq++
		r := req(i)
		flags := unix.NLM_F_REQUEST | r.flags
		if i == to {
			flags |= unix.NLM_F_ACK
		}
		b = binary.NativeEndian.AppendUint32(b, uint32(unix.NLMSG_HDRLEN+len(r.body)))
		b = binary.NativeEndian.AppendUint16(b, r.typ)
		b = binary.NativeEndian.AppendUint16(b, uint16(flags))
		b = binary.NativeEndian.AppendUint32(b, w.seq)
		b = binary.NativeEndian.AppendUint32(b, 0)
		b = append(b, r.body...)
	}
	last := w.seq
	err := unix.Sendto(w.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	if (errors.Is(err, unix.EMSGSIZE) || errors.Is(err, unix.ENOBUFS)) && to > from {
		mid := from + (to-from)/2
		if err := w.send(from, mid, req); err != nil {
			return err
		}
		return w.send(mid+1, to, req)
	}
	if err != nil {
		return fmt.Errorf("kernel floor: netlink send of %d requests: %w", to-from+1, err)
	}
	w.sends++
	var refused error
	for {
		n, _, err := unix.Recvfrom(w.fd, w.buf, 0)
		if err != nil {
			return fmt.Errorf("kernel floor: netlink receive: %w", err)
		}
		for b := w.buf[:n]; len(b) >= unix.NLMSG_HDRLEN; {
			l := int(binary.NativeEndian.Uint32(b[0:4]))
			if l < unix.NLMSG_HDRLEN || l > len(b) {
				return fmt.Errorf("kernel floor: a netlink answer of %d bytes in %d", l, len(b))
			}
			typ, seq := binary.NativeEndian.Uint16(b[4:6]), binary.NativeEndian.Uint32(b[8:12])
			if typ == unix.NLMSG_ERROR && seq >= first && seq <= last && l >= unix.NLMSG_HDRLEN+4 {
				if errno := unix.Errno(-int32(binary.NativeEndian.Uint32(b[unix.NLMSG_HDRLEN:]))); errno != 0 && refused == nil {
					refused = fmt.Errorf("kernel floor: request for peer %d refused: %w", from+int(seq-first), errno)
				}
				if seq == last {
					return refused
				}
			}
			b = b[min(len(b), (l+unix.NLMSG_ALIGNTO-1)&^(unix.NLMSG_ALIGNTO-1)):]
		}
	}
}
