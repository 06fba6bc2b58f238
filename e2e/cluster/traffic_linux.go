package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// pingLinger is how long ping waits for the reply to its last request. Between
	// namespaces a reply takes well under a millisecond; a second only matters if the
	// last one is lost.
	pingLinger = 1 * time.Second
	// minPingInterval is what iputils ping really manages per request here (MACHINE.md:
	// about 62 requests a second at -i 0.01), used to size timeouts.
	minPingInterval = 16 * time.Millisecond

	// streamTimeout bounds a whole Stream, connect included.
	streamTimeout = 60 * time.Second
)

// Ping runs iputils ping from the pod: count requests, interval apart, to the address, and
// returns how many were sent and how many answered. The address's family picks ICMP or
// ICMPv6 echo (ping -4 or -6). err is about running ping, not about lost packets: check
// received against sent.
func Ping(from *Pod, to netip.Addr, count int, interval time.Duration) (sent, received int, err error) {
	return ping(from.NS, to, count, interval)
}

func ping(ns string, to netip.Addr, count int, interval time.Duration, extra ...string) (sent, received int, err error) {
	r, err := startPing(ns, to, count, interval, extra...)
	if err != nil {
		return 0, 0, err
	}
	return r.Wait()
}

// PingWhole is Ping with requests of size bytes as IP packets, which must not be fragmented
// (ping -M do): they arrive whole or not at all, as a path's MTU allows.
func PingWhole(from *Pod, to netip.Addr, size, count int, interval time.Duration) (sent, received int, err error) {
	header := 20 + 8
	if to.Unmap().Is6() {
		header = 40 + 8
	}
	return ping(from.NS, to, count, interval, "-M", "do", "-s", strconv.Itoa(size-header))
}

// PingRun is a ping running in the background.
type PingRun struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan struct{}
	desc string

	// sent, received and err are set before done is closed.
	sent, received int
	err            error
}

// StartPing starts Ping in the background, for watching traffic while something else
// happens (a weftd restart). Size count so that the ping outlasts what it watches: at a
// 10 ms interval this machine sends about 62 requests a second, not 100.
func StartPing(from *Pod, to netip.Addr, count int, interval time.Duration) (*PingRun, error) {
	return startPing(from.NS, to, count, interval)
}

func startPing(ns string, to netip.Addr, count int, interval time.Duration, extra ...string) (*PingRun, error) {
	if count < 1 {
		return nil, fmt.Errorf("ping from %s to %s: count %d < 1", ns, to, count)
	}
	if !to.IsValid() {
		// Most likely the IP of an IPv6-only pod, or the IP6 of an IPv4-only one.
		return nil, fmt.Errorf("ping from %s: no destination address (the zero netip.Addr)", ns)
	}
	to = to.Unmap()
	family := "-4"
	if to.Is6() {
		family = "-6"
	}
	secs := strconv.FormatFloat(interval.Seconds(), 'f', -1, 64)
	args := netnsExecArgs(ns, append(append([]string{"ping", family, "-n", "-q",
		"-c", strconv.Itoa(count), "-i", secs,
		"-W", strconv.Itoa(int(pingLinger / time.Second))}, extra...), to.String())...)
	r := &PingRun{
		done: make(chan struct{}),
		desc: fmt.Sprintf("ping from %s to %s (%d every %v)", ns, to, count, interval),
	}
	// A bound well past the expected duration, so that a hung ping cannot hang a test.
	per := max(interval, minPingInterval)
	limit := time.Duration(count)*per*3 + pingLinger + 10*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	r.cmd = exec.CommandContext(ctx, "ip", args...)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	// Dies with the test binary, whose namespaces are about to be swept anyway.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("%s: starting: %w", r.desc, err)
	}
	go func() {
		defer cancel()
		runErr := r.cmd.Wait()
		r.sent, r.received, r.err = parsePing(r.out.String())
		if r.err != nil {
			r.err = fmt.Errorf("%s: %w (exit: %v)", r.desc, r.err, runErr)
		}
		close(r.done)
	}()
	return r, nil
}

// Done is closed when the ping has finished.
func (r *PingRun) Done() <-chan struct{} { return r.done }

// Wait waits for the ping to finish and returns what Ping returns.
func (r *PingRun) Wait() (sent, received int, err error) {
	<-r.done
	return r.sent, r.received, r.err
}

// Interrupt stops the ping early as Ctrl-C would; it still prints its summary. A request in
// flight at that moment counts as lost.
func (r *PingRun) Interrupt() {
	_ = r.cmd.Process.Signal(syscall.SIGINT) // it may have finished
}

// parsePing reads iputils ping's summary line: "5 packets transmitted, 4 received, ...".
func parsePing(out string) (sent, received int, err error) {
	for line := range strings.Lines(out) {
		tx, rest, ok := strings.Cut(line, " packets transmitted, ")
		if !ok {
			continue
		}
		rx, _, ok := strings.Cut(rest, " received")
		if !ok {
			continue
		}
		s, err1 := strconv.Atoi(strings.TrimSpace(tx))
		r, err2 := strconv.Atoi(strings.TrimSpace(rx))
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, fmt.Errorf("parsing ping summary %q: %w", strings.TrimSpace(line), err)
		}
		return s, r, nil
	}
	return 0, 0, fmt.Errorf("no summary in ping output %q", strings.TrimSpace(out))
}

// StreamResult describes a completed Stream or Throughput.
type StreamResult struct {
	Bytes   int64
	Elapsed time.Duration
}

// Mbps is the stream's throughput in megabits per second.
func (s StreamResult) Mbps() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Bytes) * 8 / s.Elapsed.Seconds() / 1e6
}

// Stream sends n bytes over TCP from one pod to another and checks that exactly those bytes
// arrived: the receiving socket is made inside to's namespace, the sending one inside from's,
// and the data is a pseudo-random pattern compared by SHA-256 on both ends. The whole
// exchange must finish within a minute. It goes to to's IPv4 address, or to its IPv6 one if
// it has none; StreamTo picks the address.
func Stream(from, to *Pod, n int64) (StreamResult, error) {
	return StreamTo(from, to, to.addr(), n)
}

// StreamTo is Stream to the given address of to (to.IP or to.IP6), so over that family.
func StreamTo(from, to *Pod, dst netip.Addr, n int64) (StreamResult, error) {
	desc := fmt.Sprintf("TCP stream of %d bytes from pod %s (%v) to pod %s (%s)", n, from.Name, from.Addrs(), to.Name, dst)
	// A fresh seed per stream, so that a path which replays or mixes old data cannot pass.
	var seed [32]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return StreamResult{}, fmt.Errorf("%s: seeding the pattern: %w", desc, err)
	}
	sent := sha256.New()
	var got []byte // written by receive, read once transfer has returned
	res, err := transfer(from, to, dst, n, streamTimeout,
		func(w io.Writer) (int64, error) {
			return io.CopyN(io.MultiWriter(w, sent), mrand.NewChaCha8(seed), n)
		},
		func(r io.Reader) (int64, error) {
			h := sha256.New()
			k, err := io.Copy(h, r)
			got = h.Sum(nil)
			return k, err
		})
	if err != nil {
		return StreamResult{}, fmt.Errorf("%s: %w", desc, err)
	}
	if !bytes.Equal(got, sent.Sum(nil)) {
		return StreamResult{}, fmt.Errorf("%s: the received bytes differ from the sent ones (SHA-256 %x, want %x)",
			desc, got, sent.Sum(nil))
	}
	return res, nil
}

// throughputBuffer is the size of Throughput's writes and reads: large enough that system
// calls cost little beside the copying.
const throughputBuffer = 1 << 20

// Throughput sends n bytes over TCP from one pod to another, to to's IPv4 address (its IPv6
// one if it has none), as fast as the path carries them, and checks that n bytes arrived.
// It is Stream without the pattern and the checksums, whose CPU would otherwise bound a fast
// path on a small machine: the bytes are zeros (nothing on an overlay compresses them),
// written and read a megabyte at a time. The whole exchange must finish within timeout.
func Throughput(from, to *Pod, n int64, timeout time.Duration) (StreamResult, error) {
	dst := to.addr()
	res, err := transfer(from, to, dst, n, timeout,
		func(w io.Writer) (int64, error) {
			buf := make([]byte, throughputBuffer)
			var sent int64
			for sent < n {
				k, err := w.Write(buf[:min(int64(len(buf)), n-sent)])
				sent += int64(k)
				if err != nil {
					return sent, err
				}
			}
			return sent, nil
		},
		func(r io.Reader) (int64, error) {
			buf := make([]byte, throughputBuffer)
			var got int64
			for {
				k, err := r.Read(buf)
				got += int64(k)
				switch {
				case errors.Is(err, io.EOF):
					return got, nil
				case err != nil:
					return got, err
				}
			}
		})
	if err != nil {
		return StreamResult{}, fmt.Errorf("TCP throughput of %d bytes from pod %s (%v) to pod %s (%s): %w",
			n, from.Name, from.Addrs(), to.Name, dst, err)
	}
	return res, nil
}

// ParallelThroughput is Throughput over streams connections at once, n bytes in all (n /
// streams each): the path's rate where one flow's window or one core bounds a single stream.
// Its time is from the first connect to the last receiver's EOF.
func ParallelThroughput(from, to *Pod, streams int, n int64, timeout time.Duration) (StreamResult, error) {
	each := n / int64(streams)
	errs := make([]error, streams)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() { _, errs[i] = Throughput(from, to, each, timeout) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return StreamResult{}, fmt.Errorf("%d parallel streams: %w", streams, err)
	}
	return StreamResult{Bytes: each * int64(streams), Elapsed: time.Since(start)}, nil
}

// RequestResponse sends one byte from one pod to another and waits for one byte back, count
// times over one TCP connection (netperf's TCP_RR), and returns the mean round trip: the
// latency of small requests on the path, what a service's calls see.
func RequestResponse(from, to *Pod, count int, timeout time.Duration) (time.Duration, error) {
	dst := to.addr()
	deadline := time.Now().Add(timeout)
	l, err := listenIn(to.NS, net.JoinHostPort(dst.String(), "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	if err := l.(*net.TCPListener).SetDeadline(deadline); err != nil {
		return 0, err
	}
	served := make(chan error, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			served <- fmt.Errorf("accepting: %w", err)
			return
		}
		defer conn.Close()
		if err := conn.SetDeadline(deadline); err != nil {
			served <- err
			return
		}
		var b [1]byte
		for range count {
			if _, err := io.ReadFull(conn, b[:]); err != nil {
				served <- fmt.Errorf("reading a request: %w", err)
				return
			}
			if _, err := conn.Write(b[:]); err != nil {
				served <- fmt.Errorf("answering: %w", err)
				return
			}
		}
		served <- nil
	}()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	conn, err := dialIn(ctx, from.NS, "tcp", net.JoinHostPort(dst.String(), strconv.Itoa(l.Addr().(*net.TCPAddr).Port)))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(deadline); err != nil {
		return 0, err
	}
	b := [1]byte{'r'}
	start := time.Now()
	for i := range count {
		if _, err := conn.Write(b[:]); err != nil {
			return 0, fmt.Errorf("request %d from pod %s to %s: %w", i, from.Name, dst, err)
		}
		if _, err := io.ReadFull(conn, b[:]); err != nil {
			return 0, fmt.Errorf("response %d from pod %s (%s) to %s: %w", i, to.Name, dst, from.Name, err)
		}
	}
	mean := time.Since(start) / time.Duration(count)
	if err := <-served; err != nil {
		return 0, fmt.Errorf("pod %s serving requests: %w", to.Name, err)
	}
	return mean, nil
}

// transfer connects over TCP from a pod to an address of another (to.IP or to.IP6), has send
// write n bytes into the connection, then closes its sending side, while receive reads the
// accepted end until EOF, and times the whole from the connect to the receiver's EOF. It
// fails unless receive counted n bytes, all within timeout.
func transfer(from, to *Pod, dst netip.Addr, n int64, timeout time.Duration,
	send func(io.Writer) (int64, error), receive func(io.Reader) (int64, error)) (StreamResult, error) {
	if !dst.IsValid() || (dst != to.IP && dst != to.IP6) {
		return StreamResult{}, fmt.Errorf("not an address of pod %s (%v)", to.Name, to.Addrs())
	}
	deadline := time.Now().Add(timeout)

	l, err := listenIn(to.NS, net.JoinHostPort(dst.String(), "0"))
	if err != nil {
		return StreamResult{}, err
	}
	defer l.Close()
	if err := l.(*net.TCPListener).SetDeadline(deadline); err != nil {
		return StreamResult{}, err
	}

	type received struct {
		n   int64
		err error
	}
	rc := make(chan received, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			rc <- received{err: fmt.Errorf("accepting: %w", err)}
			return
		}
		defer conn.Close()
		if err := conn.SetDeadline(deadline); err != nil {
			rc <- received{err: err}
			return
		}
		got, err := receive(conn)
		rc <- received{n: got, err: err}
	}()

	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	conn, err := dialIn(ctx, from.NS, "tcp", net.JoinHostPort(dst.String(), strconv.Itoa(l.Addr().(*net.TCPAddr).Port)))
	if err != nil {
		return StreamResult{}, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(deadline); err != nil {
		return StreamResult{}, err
	}
	sent, err := send(conn)
	if err != nil {
		return StreamResult{}, fmt.Errorf("sending (after %d bytes): %w", sent, err)
	}
	// The receiver stops at EOF; closing only our side keeps the connection for its ACKs.
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return StreamResult{}, fmt.Errorf("closing the sending side: %w", err)
	}
	got := <-rc
	elapsed := time.Since(start)
	if got.err != nil {
		return StreamResult{}, fmt.Errorf("receiving (after %d bytes): %w", got.n, got.err)
	}
	if got.n != n {
		return StreamResult{}, fmt.Errorf("received %d bytes", got.n)
	}
	return StreamResult{Bytes: n, Elapsed: elapsed}, nil
}
