package probe

import (
	"context"
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

// ICMP is a Pinger of ICMP echo requests, over one raw socket per family (it needs root or
// CAP_NET_RAW, which weftd has for netlink anyway). The kernel routes each request as any
// packet to the peer's address, through what weft programmed; answers are told apart from
// other programs' by an identifier of this Pinger's own and matched by sequence number.
type ICMP struct {
	id    int
	conns [2]*icmp.PacketConn // IPv4, IPv6; nil when that family could not be opened

	mu      sync.Mutex
	seq     uint16
	waiting map[uint16]waiter
}

// waiter is a request waiting for its answer.
type waiter struct {
	dst    netip.Addr
	answer chan struct{}
}

// ListenICMP opens the raw sockets; a family the host lacks is left out (its pings fail),
// but one of them must open. Close releases them.
func ListenICMP() (*ICMP, error) {
	c := &ICMP{id: rand.IntN(1 << 16), waiting: map[uint16]waiter{}}
	var errs []error
	for i, nw := range [2][2]string{{"ip4:icmp", "0.0.0.0"}, {"ip6:ipv6-icmp", "::"}} {
		conn, err := icmp.ListenPacket(nw[0], nw[1])
		if err != nil {
			errs = append(errs, fmt.Errorf("probe: opening an %s socket: %w", nw[0], err))
			continue
		}
		c.conns[i] = conn
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
func (c *ICMP) Ping(ctx context.Context, dst netip.Addr) (time.Duration, error) {
	dst = dst.Unmap()
	fam, typ := 0, icmp.Type(ipv4.ICMPTypeEcho)
	if dst.Is6() {
		fam, typ = 1, ipv6.ICMPTypeEchoRequest
	}
	conn := c.conns[fam]
	if conn == nil {
		return 0, fmt.Errorf("probe: ping %s: no socket for its family", dst)
	}
	w := waiter{dst: dst, answer: make(chan struct{}, 1)}
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
	msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: c.id, Seq: int(seq), Data: []byte("weft probe")}}
	b, err := msg.Marshal(nil) // the kernel fills in ICMPv6's checksum
	if err != nil {
		return 0, fmt.Errorf("probe: ping %s: %w", dst, err)
	}
	start := time.Now()
	if _, err := conn.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return 0, fmt.Errorf("probe: ping %s: %w", dst, err)
	}
	select {
	case <-w.answer:
		return time.Since(start), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("probe: ping %s: %w after %v", dst, ErrLost, time.Since(start).Round(time.Millisecond))
	}
}

// read delivers the echo replies that come to conn until it is closed.
func (c *ICMP) read(conn *icmp.PacketConn, v6 bool) {
	proto, reply := 1, icmp.Type(ipv4.ICMPTypeEchoReply)
	if v6 {
		proto, reply = 58, ipv6.ICMPTypeEchoReply
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || m.Type != reply {
			continue
		}
		echo, ok := m.Body.(*icmp.Echo)
		if !ok || echo.ID != c.id {
			continue
		}
		src, ok := netip.AddrFromSlice(from.(*net.IPAddr).IP)
		if !ok {
			continue
		}
		c.mu.Lock()
		w, ok := c.waiting[uint16(echo.Seq)]
		c.mu.Unlock()
		// Only the address asked answers for it.
		if ok && w.dst == src.Unmap() {
			select {
			case w.answer <- struct{}{}:
			default:
			}
		}
	}
}
