package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// FlanneldEnv names a prebuilt flanneld binary, which PrepareFlanneld then uses as it is.
const FlanneldEnv = "WEFT_FLANNELD"

// flanneldBuildTimeout bounds tools/flannel/install-flanneld.sh: a cold build of flanneld
// takes about two minutes on this project's two-core machines, a cached one seconds.
const flanneldBuildTimeout = 15 * time.Minute

// FlanneldArgs are the flags that make flanneld serve the node as WeftdArgs make weftd: the
// cluster's etcd (flanneld speaks its v3 API) and prefix, or in Kubernetes mode the node's
// kubeconfig and net-conf.json (weftd's flags there are flanneld's, and StartDaemon sets
// NODE_NAME for either); eth0, the node's subnet.env, no masquerade (as on the harness's
// weftd nodes), and its health endpoints where WaitReady looks (flanneld serves /healthz and
// /readyz too; its /readyz turns 200 once subnet.env is written, before it has programmed
// its peers). Options.WeftdArgs are not added: they are weftd's.
func (n *Node) FlanneldArgs() []string {
	var args []string
	if n.c.opts.Kube != nil {
		args = n.kubeArgs()
	} else {
		args = []string{"--etcd-endpoints=" + strings.Join(n.c.EtcdEndpoints(), ",")}
		if n.c.opts.EtcdPrefix != DefaultEtcdPrefix {
			args = append(args, "--etcd-prefix="+n.c.opts.EtcdPrefix)
		}
	}
	return append(args,
		"--iface=eth0",
		"--subnet-file="+n.SubnetFile,
		"--ip-masq=false",
		"--healthz-ip="+healthzIP,
		"--healthz-port="+strconv.Itoa(HealthzPort),
	)
}

// PrepareFlanneld returns the flanneld binary for tests: $WEFT_FLANNELD if set, else
// <repo>/.cache/flannel/bin/flanneld, which tools/flannel/install-flanneld.sh builds at the
// version pinned in tools/flannel/go.mod (it needs the Go toolchain, the module proxy and, on
// amd64, a C compiler; it returns at once when its stamp says the binary is current).
func PrepareFlanneld(repo string) (string, error) {
	if bin := os.Getenv(FlanneldEnv); bin != "" {
		st, err := os.Stat(bin)
		if err != nil {
			return "", fmt.Errorf("%s=%s: %w", FlanneldEnv, bin, err)
		}
		if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("%s=%s is not an executable file", FlanneldEnv, bin)
		}
		return bin, nil
	}
	dir := filepath.Join(repo, ".cache", "flannel", "bin")
	script := filepath.Join(repo, "tools", "flannel", "install-flanneld.sh")
	ctx, cancel := context.WithTimeout(context.Background(), flanneldBuildTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, script, dir).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building flanneld with %s %s: %w: %s", script, dir, err, strings.TrimSpace(string(out)))
	}
	bin := filepath.Join(dir, "flanneld")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s %s did not install flanneld: %w", script, dir, err)
	}
	return bin, nil
}

// FlanneldExeEnv names a prebuilt flanneld.exe (flanneld for Windows), which
// PrepareFlanneldExe then uses as it is.
const FlanneldExeEnv = "WEFT_FLANNELD_EXE"

// PrepareFlanneldExe returns flanneld built for Windows (amd64), for the Wine node of the
// tests: $WEFT_FLANNELD_EXE if set, else <repo>/.cache/flannel-windows/flanneld.exe, which
// tools/flannel/install-flanneld.sh builds with GOOS=windows at the version pinned in
// tools/flannel/go.mod, once: later runs find its stamp current and return at once.
func PrepareFlanneldExe(repo string) (string, error) {
	if bin := os.Getenv(FlanneldExeEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%s=%s: %w", FlanneldExeEnv, bin, err)
		}
		return bin, nil
	}
	dir := filepath.Join(repo, ".cache", "flannel-windows")
	script := filepath.Join(repo, "tools", "flannel", "install-flanneld.sh")
	ctx, cancel := context.WithTimeout(context.Background(), flanneldBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, dir)
	cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building flanneld.exe with GOOS=windows %s %s: %w: %s", script, dir, err, strings.TrimSpace(string(out)))
	}
	bin := filepath.Join(dir, "flanneld.exe")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("GOOS=windows %s %s did not install flanneld.exe: %w", script, dir, err)
	}
	return bin, nil
}

// PrepareFlanneldDeps makes sure the commands flanneld runs are installed, running
// tools/flannel/install-deps.sh (apt-get) if one is missing: iptables and ip6tables, without
// which flanneld logs an error at every resync of its FORWARD rules (iptables mode), or
// exits at start (nftables mode, which first cleans up iptables rules).
func PrepareFlanneldDeps(repo string) error {
	var missing []string
	for _, c := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	script := filepath.Join(repo, "tools", "flannel", "install-deps.sh")
	out, err := exec.Command(script).CombinedOutput()
	if err != nil {
		return fmt.Errorf("installing %s for flanneld with %s: %w: %s", strings.Join(missing, ", "), script, err,
			strings.TrimSpace(string(out)))
	}
	for _, c := range missing {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("%s ran, but %s is still missing: %w", script, c, err)
		}
	}
	return nil
}
