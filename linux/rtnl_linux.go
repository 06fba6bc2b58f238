package linux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// rtnl is a raw rtnetlink socket for what the netlink library lacks: nexthop objects and the
// routes that use them, and writes in batches. The kernel handles every message of one send
// in turn and acknowledges each, so a batch of a few hundred writes costs one system call
// rather than one round trip each.
type rtnl struct {
	s   *nl.NetlinkSocket
	fd  int
	seq uint32
	buf []byte // for receiving; what a receive returns points into it
	// msgs and out are kept from one call to the next: a dump of 65,000 peers' entries is
	// thousands of receives, and a cold start's writes hundreds of thousands of messages,
	// whose slices would otherwise be garbage at the start's peak.
	msgs []syscall.NetlinkMessage // what receive returns, until the next receive
	out  []byte                   // a batch of messages to send
}

// Constants the kernel's uapi has and golang.org/x/sys does not name.
const (
	rtaNHID = 30 // RTA_NH_ID: the nexthop object a route uses

	nlaTypeMask = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)

	// batchSize bounds the messages of one send, so that their acknowledgements fit the
	// socket's receive buffer.
	batchSize = 256
	rcvBuf    = 4 << 20
)

var native = binary.NativeEndian

func openRtnl(ns netns.NsHandle) (*rtnl, error) {
	s, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening a netlink socket in network namespace %s: %w", ns, err)
	}
	fd := s.GetFd()
	// Plain blocking calls, with a timeout so that a kernel that never answers cannot hang
	// the daemon.
	tv := unix.NsecToTimeval((10 * 1e9))
	if err := errors.Join(unix.SetNonblock(fd, false), unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv),
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBuf), unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_EXT_ACK, 1)); err != nil {
		s.Close()
		return nil, fmt.Errorf("setting up a netlink socket: %w", err)
	}
	return &rtnl{s: s, fd: fd, buf: make([]byte, 1<<16)}, nil
}

func (r *rtnl) close() { r.s.Close() }

// message is one request: its type, flags beyond NLM_F_REQUEST, and body (the family header
// and the attributes).
type message struct {
	typ   uint16
	flags uint16
	body  []byte
}

// appendFrame appends m to b as a netlink message, with flags beyond m's and seq.
func appendFrame(b []byte, m message, flags uint16, seq uint32) []byte {
	b = native.AppendUint32(b, uint32(unix.NLMSG_HDRLEN+len(m.body)))
	b = native.AppendUint16(b, m.typ)
	b = native.AppendUint16(b, unix.NLM_F_REQUEST|m.flags|flags)
	b = native.AppendUint32(b, seq)
	b = native.AppendUint32(b, 0) // the port: the kernel's
	return append(b, m.body...)
}

// exec sends the messages, batchSize at a time, and returns each one's error (nil when the
// kernel took it). Only the last message of a batch asks for an acknowledgement: the kernel
// handles a batch in order and answers the others only when they fail, so a batch costs one
// send and, when all goes well, one receive.
func (r *rtnl) exec(msgs []message) []error {
	errs := make([]error, len(msgs))
	for start := 0; start < len(msgs); start += batchSize {
		end := min(start+batchSize, len(msgs))
		first := r.seq + 1
		buf := r.out[:0]
		for i, m := range msgs[start:end] {
			r.seq++
			var ack uint16
			if start+i == end-1 {
				ack = unix.NLM_F_ACK
			}
			buf = appendFrame(buf, m, ack, r.seq)
		}
		r.out = buf
		last := r.seq
		fail := func(err error) {
			for i := start; i < end; i++ {
				if errs[i] == nil {
					errs[i] = err
				}
			}
		}
		if err := unix.Sendto(r.fd, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			fail(fmt.Errorf("netlink send: %w", err))
			continue
		}
		for done := false; !done; {
			answers, err := r.receive()
			if err != nil {
				fail(fmt.Errorf("netlink receive: %w", err))
				break
			}
			for _, m := range answers {
				if m.Header.Type != unix.NLMSG_ERROR || m.Header.Seq < first || m.Header.Seq > last {
					continue // not ours: a late answer to an earlier batch that timed out
				}
				errs[start+int(m.Header.Seq-first)] = ackError(m.Data)
				done = done || m.Header.Seq == last
			}
		}
	}
	return errs
}

// ackError reads an NLMSG_ERROR: nil for an acknowledgement, else the errno.
func ackError(data []byte) error {
	if len(data) < 4 {
		return errors.New("short netlink acknowledgement")
	}
	if code := int32(native.Uint32(data[:4])); code != 0 {
		return syscall.Errno(-code)
	}
	return nil
}

// receive reads one answer; the messages, and what they point into, are r's until the next
// receive.
func (r *rtnl) receive() ([]syscall.NetlinkMessage, error) {
	for {
		n, _, err := unix.Recvfrom(r.fd, r.buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		r.msgs, err = parseMessages(r.msgs[:0], r.buf[:nlmAlign(n)])
		return r.msgs, err
	}
}

// parseMessages appends the netlink messages in b to msgs, their Data pointing into b, as
// syscall.ParseNetlinkMessage reads them (which makes a slice for every call): a message
// shorter than its header, or whose aligned length runs past b, is EINVAL; bytes after the
// last message too few for a header are ignored.
func parseMessages(msgs []syscall.NetlinkMessage, b []byte) ([]syscall.NetlinkMessage, error) {
	for len(b) >= unix.NLMSG_HDRLEN {
		h := syscall.NlMsghdr{Len: native.Uint32(b[0:4]), Type: native.Uint16(b[4:6]), Flags: native.Uint16(b[6:8]),
			Seq: native.Uint32(b[8:12]), Pid: native.Uint32(b[12:16])}
		if h.Len < unix.NLMSG_HDRLEN || uint64(nlmAlign(int(h.Len))) > uint64(len(b)) {
			return msgs[:0], syscall.EINVAL
		}
		msgs = append(msgs, syscall.NetlinkMessage{Header: h, Data: b[unix.NLMSG_HDRLEN:h.Len]})
		b = b[nlmAlign(int(h.Len)):]
	}
	return msgs, nil
}

func nlmAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// dump runs a dump request and calls f with the body of every answer of type typ. A dump
// the kernel interrupted (the table changed meanwhile) returns netlink.ErrDumpInterrupted,
// for the caller to run again.
func (r *rtnl) dump(m message, typ uint16, f func(body []byte)) error {
	r.seq++
	seq := r.seq
	r.out = appendFrame(r.out[:0], m, unix.NLM_F_DUMP, seq)
	if err := unix.Sendto(r.fd, r.out, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	interrupted := false
	for {
		msgs, err := r.receive()
		if err != nil {
			return fmt.Errorf("netlink receive: %w", err)
		}
		for _, msg := range msgs {
			if msg.Header.Seq != seq {
				continue
			}
			if msg.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
				interrupted = true
			}
			switch msg.Header.Type {
			case unix.NLMSG_DONE:
				if interrupted {
					return netlink.ErrDumpInterrupted
				}
				return nil
			case unix.NLMSG_ERROR:
				if err := ackError(msg.Data); err != nil {
					return err
				}
			case typ:
				f(msg.Data)
			}
		}
	}
}

// attr encodes one netlink attribute, padded.
func attr(b []byte, typ uint16, data []byte) []byte {
	l := unix.SizeofRtAttr + len(data)
	var h [unix.SizeofRtAttr]byte
	native.PutUint16(h[0:2], uint16(l))
	native.PutUint16(h[2:4], typ)
	b = append(b, h[:]...)
	b = append(b, data...)
	for range nlaAlign(l) - l {
		b = append(b, 0)
	}
	return b
}

func nlaAlign(n int) int { return (n + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1) }

func u32(v uint32) []byte { return native.AppendUint32(nil, v) }

// eachAttr calls f with every attribute of a body after its fixed header of n bytes; the
// data points into body.
func eachAttr(body []byte, n int, f func(typ uint16, data []byte)) {
	if len(body) < n {
		return
	}
	b := body[n:]
	for len(b) >= unix.SizeofRtAttr {
		l := int(native.Uint16(b[0:2]))
		if l < unix.SizeofRtAttr || l > len(b) {
			return
		}
		f(native.Uint16(b[2:4])&nlaTypeMask, b[unix.SizeofRtAttr:l])
		b = b[min(nlaAlign(l), len(b)):]
	}
}

func addrFrom(b []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(b)
	return a
}
