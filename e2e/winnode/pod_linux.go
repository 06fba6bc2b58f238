package winnode

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Pod is wincni.exe under Wine in the node, taking a pod sandbox through its steps as
// containerd would (tools/wincni): "netns" makes its HNS namespace, "add", "check" and "del"
// call the CNI as containerd's CRI plugin does.
type Pod struct {
	tb     testing.TB
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    chan string
	stderr *lockedBuffer
}

// lockedBuffer is wincni.exe's standard error, written by exec's copier while a failing step
// reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Answer is one step's answer (see tools/wincni).
type Answer struct {
	Step   string
	Error  string
	Netns  string
	Result []struct {
		Interfaces []struct{ Name, Mac string }
		IPs        []struct {
			Address string
			Gateway string
		}
	}
	Closed *bool
}

// RunPod starts wincni.exe of programs in the node for the pod sandbox id (the pod web in
// namespace default), the pod's DNS config being kubeadm's cluster DNS. Its working
// directory is the prefix's drive C:, so that what the CNI library and host-local keep under
// \var\lib\cni is on drive C:, as on a real node. It is stopped when tb ends.
func (w *Node) RunPod(programs, id string) *Pod {
	tb := w.tb
	tb.Helper()
	argv := w.Wine(filepath.Join(programs, "wincni.exe"), "--id="+id,
		`--conf-dir=C:\etc\cni\net.d`, `--bin-dir=C:\opt\cni\bin`, "--name=web", "--namespace=default",
		"--uid=6b2f1c9e-2d1f-4a55-9a8e-0c7d3e5f1a20", "--dns-servers=10.96.0.10",
		"--dns-searches=default.svc.cluster.local,svc.cluster.local")
	cmd := exec.Command("ip", append([]string{"netns", "exec", w.NS}, argv...)...)
	cmd.Dir = filepath.Join(w.Prefix, "drive_c")
	p := &Pod{tb: tb, cmd: cmd, out: make(chan string), stderr: &lockedBuffer{}}
	cmd.Stderr = p.stderr
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			p.out <- lines.Text()
		}
		close(p.out)
	}()
	tb.Cleanup(func() {
		p.in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
		if tb.Failed() {
			tb.Logf("wincni.exe's standard error (the plugins' log):\n%s", p.stderr)
		}
	})
	return p
}

// Step runs one step and returns its answer; a step that fails fails the test.
func (p *Pod) Step(step string) Answer {
	p.tb.Helper()
	start := time.Now()
	if _, err := io.WriteString(p.in, step+"\n"); err != nil {
		p.tb.Fatalf("%s: %v\n%s", step, err, p.stderr)
	}
	select {
	case line, ok := <-p.out:
		if !ok {
			p.tb.Fatalf("%s: wincni.exe exited\n%s", step, p.stderr)
		}
		var a Answer
		if err := json.Unmarshal([]byte(line), &a); err != nil || a.Step != step {
			p.tb.Fatalf("%s: answer %q (%v)", step, line, err)
		}
		if a.Error != "" {
			p.tb.Fatalf("%s: %s\nplugins' log:\n%s", step, a.Error, p.stderr)
		}
		p.tb.Logf("%s: %s (%v)", step, line, time.Since(start).Round(time.Millisecond))
		return a
	case <-time.After(2 * time.Minute):
		p.tb.Fatalf("%s: no answer after 2 minutes\n%s", step, p.stderr)
	}
	return Answer{}
}
