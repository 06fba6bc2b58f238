package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/vishvananda/netns"
)

// netnsDir is where `ip netns` keeps the bind mounts that name namespaces.
const netnsDir = "/var/run/netns"

// InNetns runs fn on a fresh OS thread switched into the named network namespace and waits
// for it. Sockets fn creates stay in that namespace for their whole life, whichever thread
// later uses them, which is what lets the harness reach addresses that exist only inside a
// node or a pod without running a helper process there.
func InNetns(name string, fn func() error) error {
	target, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("opening network namespace %s: %w", name, err)
	}
	defer target.Close()

	errc := make(chan error, 1)
	go func() {
		// A goroutine of its own, so that the thread it locks is never one the caller
		// expects to stay where it was.
		runtime.LockOSThread()
		origin, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("reading this thread's network namespace: %w", err)
			return
		}
		defer origin.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering network namespace %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(origin); err != nil {
			// The thread is stuck in the wrong namespace: leave it locked so that the
			// runtime destroys it when this goroutine ends instead of reusing it.
			errc <- fmt.Errorf("leaving network namespace %s: %w (after: %v)", name, err, ferr)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// dialIn connects to addr from inside the named network namespace.
func dialIn(ctx context.Context, name, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := InNetns(name, func() error {
		// The socket is created before DialContext first blocks, on this locked thread.
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		conn = c
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dialing %s %s from namespace %s: %w", network, addr, name, err)
	}
	return conn, nil
}

// listenIn opens a TCP listener on addr inside the named network namespace.
func listenIn(name, addr string) (net.Listener, error) {
	var l net.Listener
	err := InNetns(name, func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listening on %s in namespace %s: %w", addr, name, err)
	}
	return l, nil
}

// writeSysctl sets a /proc/sys value (path relative to /proc/sys, with slashes) inside the
// named network namespace: /proc/sys/net is resolved against the namespace of the thread
// that opens it.
func writeSysctl(name, key, value string) error {
	return InNetns(name, func() error {
		if err := os.WriteFile("/proc/sys/"+key, []byte(value), 0o644); err != nil {
			return fmt.Errorf("setting %s=%s in namespace %s: %w", key, value, name, err)
		}
		return nil
	})
}

// ipv6Sysctls are what enableIPv6 sets, in this order.
func ipv6Sysctls() [][2]string {
	return [][2]string{
		// IPv6 on, whatever the host's defaults are (net.core.devconf_inherit_init_net
		// may hand a new namespace the host's disable_ipv6=1). "all" applies to the
		// devices that exist (lo), "default" to those made later.
		{"net/ipv6/conf/all/disable_ipv6", "0"},
		{"net/ipv6/conf/default/disable_ipv6", "0"},
		// No duplicate address detection: the kernel does it on a device unless both
		// all's value and the device's are 0, and an address under it is tentative for
		// about a second, in which it can be neither a source nor a neighbour discovery
		// target (a pod's gateway on cni0 would not answer). Every address here is
		// unique by construction.
		{"net/ipv6/conf/all/accept_dad", "0"},
		{"net/ipv6/conf/default/accept_dad", "0"},
	}
}

// enableIPv6 turns IPv6 on and duplicate address detection off in the named namespace. It
// is called right after the namespace is made, before any device but lo exists there: a
// device takes "default"'s values when it is made in or moved into the namespace (the
// veths of nodes and pods, cni0, weftd's VXLAN devices), so all of them get these.
func enableIPv6(name string) error {
	return InNetns(name, func() error {
		for _, kv := range ipv6Sysctls() {
			err := os.WriteFile("/proc/sys/"+kv[0], []byte(kv[1]), 0o644)
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("setting %s=%s in namespace %s: %w (no IPv6 in this kernel: booted with ipv6.disable=1?)",
					kv[0], kv[1], name, err)
			}
			if err != nil {
				return fmt.Errorf("setting %s=%s in namespace %s: %w", kv[0], kv[1], name, err)
			}
		}
		return nil
	})
}

// cmdTimeout bounds every helper command (ip, bridge, a CNI plugin): none of them should
// take more than a moment, and a hung one must not hang the test until its global timeout.
const cmdTimeout = 30 * time.Second

// run runs a command on the host and returns its combined output; the error carries the
// command line and the output.
func run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err,
			strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ip runs the ip command.
func ip(args ...string) error {
	_, err := run("ip", args...)
	return err
}

// netnsExecArgs is the argument list that runs argv inside a named network namespace.
func netnsExecArgs(ns string, argv ...string) []string {
	return append([]string{"netns", "exec", ns}, argv...)
}

// listNetns returns the names of all named network namespaces.
func listNetns() ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing network namespaces: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// netnsPids returns the processes living in the named network namespace.
func netnsPids(name string) ([]int, error) {
	out, err := run("ip", "netns", "pids", name)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// destroyNetns kills every process in the named namespace and deletes it. Killing first
// matters: a namespace that a process still holds outlives its name, with its devices.
func destroyNetns(name string) error {
	for attempt := 0; attempt < 50; attempt++ {
		pids, err := netnsPids(name)
		if err != nil {
			break // gone already, or unreadable: deleting below says which
		}
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill() // it may have exited on its own meanwhile
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(netnsDir + "/" + name); os.IsNotExist(err) {
		return nil
	}
	if err := ip("netns", "del", name); err != nil {
		return fmt.Errorf("deleting network namespace %s: %w", name, err)
	}
	return nil
}

// Listen opens a TCP listener on addr inside the node's network namespace: a service its
// programs reach on the node's loopback (the simulated HNS of a Windows node).
func (n *Node) Listen(addr string) (net.Listener, error) { return listenIn(n.NS, addr) }

// Do runs fn on a thread of its own in the node's network namespace and waits for it: what
// fn opens (an ethtool socket, to read the node's devices) stays in the namespace.
func (n *Node) Do(fn func() error) error { return InNetns(n.NS, fn) }
