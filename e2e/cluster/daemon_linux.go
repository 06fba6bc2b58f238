package cluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// wgSocketDir is where user-space WireGuard devices serve their UAPI sockets, and wgctrl
// looks for them.
const wgSocketDir = "/run/wireguard"

// StartDaemon starts argv (a binary and its flags) in the node's namespace in weftd's place,
// the way Start starts weftd: output appended to LogPath after a line naming the run, a
// process group of its own, killed with this process unless the cluster is kept. Stop,
// Running, Pid, ExitState, WaitReady, LogTail and Close then treat it as the node's daemon.
// This is how a node runs flanneld (see FlanneldArgs), or weftd in a cluster made without
// Options.Weftd so that AddNode leaves the choice of daemon to the caller (see WeftdArgs). It
// is an error if the node's daemon is running.
func (n *Node) StartDaemon(argv ...string) error {
	if len(argv) == 0 {
		return fmt.Errorf("node %s: StartDaemon: no command", n.Name)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil && !n.proc.exited() {
		return fmt.Errorf("node %s: its daemon is running already (pid %d)", n.Name, n.proc.cmd.Process.Pid)
	}
	env := os.Environ()
	if n.c.opts.Kube != nil {
		env = n.kubeEnv()
	}
	// A node's WireGuard key is its own, as on a machine of its own (flanneld and weftd read
	// the file WIREGUARD_KEY_FILE names); so is /run/wireguard, where user-space WireGuard
	// devices serve their UAPI sockets by device name: every node has a flannel-wg. `ip netns
	// exec` gives the daemon a mount namespace of its own, so the mount stays the node's.
	env = append(env, "WIREGUARD_KEY_FILE="+filepath.Join(n.Dir, "wgkey"))
	if err := os.MkdirAll(wgSocketDir, 0o755); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	argv = append([]string{"sh", "-c", `mount -t tmpfs weft-e2e-wireguard ` + wgSocketDir + ` && exec "$@"`, "sh"}, argv...)
	n.runs++
	p, err := n.c.spawn(n.NS, n.LogPath, n.runs, env, argv)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	n.proc = p
	return nil
}

// WeftdArgs are the flags the harness gives weftd on this node (Options.WeftdArgs last), for
// StartDaemon.
func (n *Node) WeftdArgs() []string { return n.weftdArgs() }
