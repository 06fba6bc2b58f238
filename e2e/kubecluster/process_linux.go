package kubecluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// stopTimeout is how long a program has to exit after SIGTERM before it is killed.
	stopTimeout = 10 * time.Second
	// logTailBytes is how much of a program's log goes into an error about it.
	logTailBytes = 3000
)

// process is a long-lived program the cluster started: a control-plane component, a node's
// containerd or kubelet.
type process struct {
	name    string // for messages: "kubelet of node1"
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when it has exited
}

// start runs argv with its output in logPath, in a process group of its own (a Ctrl-C meant
// for the test reaches only the test) and killed if this process dies, so that a test binary
// killed by its timeout leaves no control plane behind. Wrappers in argv (nsenter, ip netns
// exec) exec the program in place, which keeps both.
func start(name, logPath string, env, argv []string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: opening its log: %w", name, err)
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "=== weft-kubecluster %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: starting %s: %w", name, argv[0], err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // how it ended is in ProcessState and its log
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits for the process to exit, killing it after stopTimeout.
func (p *process) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // it may exit meanwhile
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the end of the process's log, for an error.
func (p *process) tail() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(data) > logTailBytes {
		data = data[len(data)-logTailBytes:]
	}
	return string(bytes.TrimRight(data, "\n"))
}

// nsInode is the inode of a namespace file (/proc/<pid>/ns/net, a pinned one), which tells
// namespaces apart.
func nsInode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("reading namespace %s: %w", path, err)
	}
	return st.Ino, nil
}

// killNamespaces kills, with SIGKILL, every process that lives in one of the namespaces
// (files naming them: /var/run/netns/<name>, a pinned mount namespace) and every descendant
// of one, until none is left or ten seconds have passed. Descendants matter: containerd's
// shims are in the node's namespaces, but the containers they run are in namespaces of their
// own.
func killNamespaces(files ...string) error {
	want := map[uint64]bool{}
	for _, f := range files {
		ino, err := nsInode(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		want[ino] = true
	}
	if len(want) == 0 {
		return nil
	}
	return killAll(func() []int { return processesIn(want) })
}

// killAll sends SIGKILL to every process list names, again and again, until list names none
// or ten seconds have passed: a process may fork while its siblings die.
func killAll(list func() []int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := list()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still alive after SIGKILL", pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL) // it may be gone already
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processesIn lists the processes whose network or mount namespace is one of inodes, and
// their descendants.
func processesIn(inodes map[uint64]bool) []int {
	entries, _ := os.ReadDir("/proc") // /proc is always there; a race only loses entries
	parent := map[int]int{}
	var in []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if ppid, ok := parentOf(pid); ok {
			parent[pid] = ppid
		}
		for _, ns := range []string{"net", "mnt"} {
			if ino, err := nsInode(filepath.Join("/proc", e.Name(), "ns", ns)); err == nil && inodes[ino] {
				in = append(in, pid)
				break
			}
		}
	}
	marked := map[int]bool{}
	for _, pid := range in {
		marked[pid] = true
	}
	// A descendant's ancestors are walked up to a marked one; the map is small (one
	// machine's processes), so the quadratic worst case does not matter.
	var out []int
	for pid := range parent {
		for p, hops := pid, 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if marked[p] {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// parentOf reads a process's parent from /proc/<pid>/stat, whose second field (the command
// name, in parentheses) may hold spaces and parentheses itself.
func parentOf(pid int) (int, bool) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(fields[1])
	return ppid, err == nil
}
