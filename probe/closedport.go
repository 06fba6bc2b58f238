package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// Checker checks that a TCP segment or a UDP datagram reaches a peer through the data plane
// with a checksum the peer accepts. Check sends one (proto "tcp" or "udp") to dst and waits
// until ctx is done for the sign that it arrived: nil when it did, ErrLost (wrapped) when no
// sign came, another error when it could not be sent. It is called from several goroutines
// at once.
type Checker interface {
	Check(ctx context.Context, dst netip.Addr, proto string) error
}

// DiscardPort is the port ClosedPort sends to: discard (RFC 863), which no node serves
// nowadays, and which discards what it gets where it is served.
const DiscardPort = 9

// ClosedPort is a Checker that needs nothing running on the peer, so it works with flanneld
// peers too: it knocks at a port nobody listens on, and the peer's kernel answers only for a
// packet whose checksum it found valid. TCP: a connection attempt, refused (a RST) or, should
// someone listen after all, accepted and closed at once. UDP: a datagram on a connected
// socket; the peer's ICMP port unreachable shows as ECONNREFUSED on the next read. Peers
// rate-limit ICMP errors per destination (about one a second), so a caller checks one peer
// over UDP every few seconds at most.
type ClosedPort struct {
	// Port is where to knock; 0: DiscardPort.
	Port uint16
}

// Check implements Checker.
func (c ClosedPort) Check(ctx context.Context, dst netip.Addr, proto string) error {
	port := c.Port
	if port == 0 {
		port = DiscardPort
	}
	to := netip.AddrPortFrom(dst.Unmap(), port).String()
	start := time.Now()
	var err error
	switch proto {
	case "tcp":
		err = knockTCP(ctx, to)
	case "udp":
		err = knockUDP(ctx, to)
	default:
		return fmt.Errorf("probe: %s check of %s: unknown protocol", proto, to)
	}
	switch {
	case err == nil:
		return nil
	// The dial's own deadline (the context's) may fire a moment before the context says it
	// is done: its i/o timeout is as lost as the context's end.
	case ctx.Err() != nil || errors.Is(err, ErrLost) || errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return fmt.Errorf("probe: %s to %s: %w after %v", proto, to, ErrLost, time.Since(start).Round(time.Millisecond))
	}
	return fmt.Errorf("probe: %s to %s: %w", proto, to, err)
}

// knockTCP: a refused or accepted connection both mean the SYN got through.
func knockTCP(ctx context.Context, to string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", to)
	if err == nil {
		return conn.Close()
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil
	}
	return err
}

// knockUDP: a refusal (the peer's port unreachable) or an answer both mean the datagram got
// through.
func knockUDP(ctx context.Context, to string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", to)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := conn.Write([]byte("weft probe")); err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		return err
	}
	buf := make([]byte, 64)
	_, err = conn.Read(buf)
	switch {
	case err == nil, errors.Is(err, syscall.ECONNREFUSED):
		return nil
	case errors.Is(err, net.ErrClosed), isTimeout(err):
		return ErrLost
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
