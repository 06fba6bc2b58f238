package probe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Header lengths an echo's size counts: the IP header (without options or extension
// headers) and the ICMP echo's own.
const (
	ipv4Header = 20
	ipv6Header = 40
	echoHeader = 8
)

// ICMP is a Pinger of ICMP echo requests, over one raw socket per family (it needs root or
// CAP_NET_RAW, which weftd has for netlink anyway). The kernel routes each request as any
// packet to the peer's address, through what weft programmed; answers are told apart from
// other programs' by an identifier of this Pinger's own and matched by sequence number.
//
// Its requests must not be fragmented, on the way or before they leave (the sockets probe
// the path: they set DF and disregard what the kernel learnt of the path's MTU), so that an
// echo of a given size shows whether the path carries a packet of that size whole.
type ICMP struct {
	id    int
	conns [2]*net.IPConn // IPv4, IPv6; nil when that family could not be opened
	// whole reports, per family, that fragmentation is forbidden on the socket: a sized
	// echo is refused without it, since its answer would prove nothing.
	whole [2]bool

	mu      sync.Mutex
	seq     uint16
	waiting map[uint16]waiter
}

// waiter is a request waiting for its answer: nil for an echo reply, a *TooBig when a
// router on the way sent its MTU back instead.
type waiter struct {
	dst    netip.Addr
	answer chan error
}

// TooBig is what a sized echo gets instead of its reply when a router on the way (the peer
// itself, forwarding to its pods) could not pass it on whole: the ICMP "fragmentation
// needed" or ICMPv6 "packet too big" error, with the MTU it names.
type TooBig struct {
	From netip.Addr // the router that sent it
	MTU  int        // the largest packet it passes on there
}

func (e *TooBig) Error() string {
	return fmt.Sprintf("%s passes on packets of %d bytes at most (fragmentation needed)", e.From, e.MTU)
}

// ListenICMP opens the raw sockets; a family the host lacks is left out (its pings fail),
// but one of them must open. Close releases them.
func ListenICMP() (*ICMP, error) {
	c := &ICMP{id: rand.IntN(1 << 16), waiting: map[uint16]waiter{}}
	var errs []error
	for i, nw := range [2][2]string{{"ip4:icmp", "0.0.0.0"}, {"ip6:ipv6-icmp", "::"}} {
		pc, err := net.ListenPacket(nw[0], nw[1])
		if err != nil {
			errs = append(errs, fmt.Errorf("probe: opening an %s socket: %w", nw[0], err))
			continue
		}
		conn := pc.(*net.IPConn)
		c.conns[i] = conn
		c.whole[i] = forbidFragments(conn, i == 1) == nil
		go c.read(conn, i == 1)
	}
	if c.conns[0] == nil && c.conns[1] == nil {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// Close closes the sockets; pending pings fail.
func (c *ICMP) Close() error {
	var errs []error
	for _, conn := range c.conns {
		if conn != nil {
			errs = append(errs, conn.Close())
		}
	}
	return errors.Join(errs...)
}

// Ping implements Pinger.
func (c *ICMP) Ping(ctx context.Context, dst netip.Addr, size int) (time.Duration, error) {
	dst = dst.Unmap()
	fam, typ, header := 0, icmp.Type(ipv4.ICMPTypeEcho), ipv4Header
	if dst.Is6() {
		fam, typ, header = 1, ipv6.ICMPTypeEchoRequest, ipv6Header
	}
	conn := c.conns[fam]
	if conn == nil {
		return 0, fmt.Errorf("probe: ping %s: no socket for its family", dst)
	}
	data := []byte("weft probe")
	if size > 0 {
		if !c.whole[fam] {
			return 0, fmt.Errorf("probe: ping %s with %d bytes: fragmentation cannot be forbidden on this host", dst, size)
		}
		if pad := size - header - echoHeader - len(data); pad > 0 {
			data = append(data, make([]byte, pad)...)
		}
	}
	w := waiter{dst: dst, answer: make(chan error, 1)}
	c.mu.Lock()
	c.seq++
	seq := c.seq
	c.waiting[seq] = w
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, seq)
		c.mu.Unlock()
	}()
	msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: c.id, Seq: int(seq), Data: data}}
	b, err := msg.Marshal(nil) // the kernel fills in ICMPv6's checksum
	if err != nil {
		return 0, fmt.Errorf("probe: ping %s: %w", dst, err)
	}
	start := time.Now()
	if _, err := conn.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return 0, fmt.Errorf("probe: ping %s: %w", dst, err)
	}
	select {
	case err := <-w.answer:
		if err != nil {
			return 0, fmt.Errorf("probe: ping %s with %d bytes: %w", dst, size, err)
		}
		return time.Since(start), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("probe: ping %s: %w after %v", dst, ErrLost, time.Since(start).Round(time.Millisecond))
	}
}

// read delivers what comes to conn until it is closed: echo replies, and the errors that
// routers send back for sized echoes they could not pass on (the IPv4 header is gone from
// what is read already: the net package strips it from what raw sockets read).
func (c *ICMP) read(conn *net.IPConn, v6 bool) {
	proto, reply, tooBig := 1, icmp.Type(ipv4.ICMPTypeEchoReply), icmp.Type(ipv4.ICMPTypeDestinationUnreachable)
	if v6 {
		proto, reply, tooBig = 58, ipv6.ICMPTypeEchoReply, ipv6.ICMPTypePacketTooBig
	}
	buf := make([]byte, 1<<16) // a sized echo's answer is as large as the overlay's MTU
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		src, ok := netip.AddrFromSlice(from.(*net.IPAddr).IP)
		if !ok {
			continue
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil {
			continue
		}
		var seq int
		var dst netip.Addr // the address asked
		var answer error
		switch {
		case m.Type == reply:
			echo, ok := m.Body.(*icmp.Echo)
			if !ok || echo.ID != c.id {
				continue
			}
			seq, dst = echo.Seq, src.Unmap()
		case m.Type == tooBig && (v6 || m.Code == 4): // IPv4: code 4, fragmentation needed
			var mtu int
			if seq, dst, mtu, ok = c.quoted(buf[:n], v6); !ok {
				continue
			}
			answer = &TooBig{From: src.Unmap(), MTU: mtu}
		default:
			continue
		}
		c.mu.Lock()
		w, ok := c.waiting[uint16(seq)]
		c.mu.Unlock()
		// Only the address asked answers for it.
		if ok && w.dst == dst {
			select {
			case w.answer <- answer:
			default:
			}
		}
	}
}

// quoted reads an ICMP error that quotes one of this Pinger's echo requests: the request's
// sequence number and destination, and the MTU the error names (the next-hop MTU of IPv4's
// "fragmentation needed", RFC 1191; ICMPv6's "packet too big", RFC 4443). ok is false for
// an error about anything else.
func (c *ICMP) quoted(b []byte, v6 bool) (seq int, dst netip.Addr, mtu int, ok bool) {
	if len(b) < 8 {
		return 0, netip.Addr{}, 0, false
	}
	// The MTU: the last two bytes of IPv4's header word, ICMPv6's whole word.
	if v6 {
		mtu = int(binary.BigEndian.Uint32(b[4:8]))
	} else {
		mtu = int(binary.BigEndian.Uint16(b[6:8]))
	}
	q := b[8:] // the request, from its IP header on
	var hdr int
	var echoType byte
	if v6 {
		// Extension headers are not expected on these requests: none are sent.
		if len(q) < ipv6Header || q[6] != 58 {
			return 0, netip.Addr{}, 0, false
		}
		hdr, echoType = ipv6Header, byte(ipv6.ICMPTypeEchoRequest)
		dst = netip.AddrFrom16([16]byte(q[24:40]))
	} else {
		if len(q) < ipv4Header || q[0]>>4 != 4 || q[9] != 1 {
			return 0, netip.Addr{}, 0, false
		}
		hdr, echoType = int(q[0]&0x0f)*4, byte(ipv4.ICMPTypeEcho)
		dst = netip.AddrFrom4([4]byte(q[16:20]))
	}
	if len(q) < hdr+echoHeader {
		return 0, netip.Addr{}, 0, false
	}
	e := q[hdr:]
	if e[0] != echoType || int(binary.BigEndian.Uint16(e[4:6])) != c.id {
		return 0, netip.Addr{}, 0, false
	}
	return int(binary.BigEndian.Uint16(e[6:8])), dst, mtu, true
}
