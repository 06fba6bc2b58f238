package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/weftnet/weft/windows/hnsfile"
)

// kubeProxyUsage is `weftctl kube-proxy -h`'s.
const kubeProxyUsage = `weftctl kube-proxy [flags] -- KUBE-PROXY [ARG...]

Runs Windows kube-proxy (kernelspace mode) with what weftd decided for it: the pods' HNS
network (--network-name) and, on an overlay network, the source VIP weftd keeps out of the
pods' range (--source-vip), read from hns.json and sourceVip.json next to subnet.env. It waits
until weftd has written them, then runs KUBE-PROXY with ARGs and those two flags (one already
among ARGs is left as given), passes on its output, stops it when stopped, and exits with its
exit status. This is how weft's kube-proxy DaemonSet for Windows nodes starts it
(dist/kubernetes/kube-proxy-windows.yaml).

Flags:
`

// exitStatus is a child's exit status, for Main to exit with.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// kubeProxyArgs are the flags weftctl kube-proxy adds to kube-proxy's for the node's network:
// each one that args lacks.
func kubeProxyArgs(n hnsfile.Network, args []string) []string {
	has := func(flag string) bool {
		for _, a := range args {
			if a == "--"+flag || a == "-"+flag || strings.HasPrefix(a, "--"+flag+"=") || strings.HasPrefix(a, "-"+flag+"=") {
				return true
			}
		}
		return false
	}
	out := append([]string(nil), args...)
	if !has("network-name") {
		out = append(out, "--network-name="+n.Name)
	}
	if strings.EqualFold(n.Type, hnsfile.Overlay) && !has("source-vip") {
		out = append(out, "--source-vip="+n.SourceVIP.String())
	}
	return out
}

// waitNetwork reads the network files next to subnetFile, every interval until weftd has
// written them: hns.json, and on an overlay network sourceVip.json too. A file that is there
// but unreadable is an error at once.
func waitNetwork(ctx context.Context, subnetFile string, interval time.Duration, log io.Writer) (hnsfile.Network, error) {
	waiting := time.Time{}
	for {
		n, err := hnsfile.Read(subnetFile)
		if err != nil {
			return hnsfile.Network{}, err
		}
		missing := ""
		switch {
		case n.Name == "":
			missing = hnsfile.NetworkFile
		case strings.EqualFold(n.Type, hnsfile.Overlay) && !n.SourceVIP.IsValid():
			missing = hnsfile.SourceVIPFile
		default:
			return n, nil
		}
		if time.Since(waiting) > time.Minute {
			fmt.Fprintf(log, "weftctl kube-proxy: waiting for weftd's %s next to %s\n", missing, subnetFile)
			waiting = time.Now()
		}
		select {
		case <-ctx.Done():
			return hnsfile.Network{}, fmt.Errorf("waiting for %s next to %s: %w", missing, subnetFile, ctx.Err())
		case <-time.After(interval):
		}
	}
}

func runKubeProxy(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("kube-proxy", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, kubeProxyUsage)
		fs.PrintDefaults()
	}
	subnetFile := fs.String("subnet-file", `C:\run\flannel\subnet.env`, "weftd's --subnet-file, next to which it writes hns.json and sourceVip.json")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	child := fs.Args()
	if len(child) == 0 {
		return usageError{errors.New("no kube-proxy to run: weftctl kube-proxy [flags] -- KUBE-PROXY [ARG...]")}
	}
	n, err := waitNetwork(ctx, *subnetFile, time.Second, os.Stderr)
	if err != nil {
		return err
	}
	argv := kubeProxyArgs(n, child[1:])
	fmt.Fprintf(os.Stderr, "weftctl kube-proxy: HNS network %s (%s), source VIP %v: %s %s\n", n.Name, n.Type, n.SourceVIP, child[0], strings.Join(argv, " "))
	cmd := exec.CommandContext(ctx, child[0], argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, out, os.Stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() >= 0 {
			return exitStatus(exit.ExitCode())
		}
		return fmt.Errorf("running %s: %w", child[0], err)
	}
	return nil
}
