//go:build windows

// Command wincni gives a pod its network on Windows as containerd's CRI plugin does, with
// containerd's own code: the pod's HNS namespace from containerd's pkg/netns (HNS v2's
// HostComputeNamespace, as containerd makes and deletes it) and the CNI calls through
// go-cni, configured as the CRI plugin configures it on Windows (one network at least, the
// configuration directory's first file, no loopback network) and called with the CRI
// plugin's arguments (the namespace's GUID as CNI_NETNS, the sandbox ID as CNI_CONTAINERID,
// the K8S_POD_* labels, the DNS capability). weft's end-to-end test runs it under Wine
// against the simulated HNS, with the real win-overlay and win-bridge behind weft's plugin.
//
// It reads one step a line from its standard input and answers each with one JSON line on
// its standard output, {"step":..., ...} and "error" if the step failed, so that the caller
// can look at HNS between steps:
//
//	netns  make the pod's namespace ({"netns": its GUID})
//	add    the CNI ADD of every network, as RunPodSandbox ({"result": the plugins' results})
//	check  the CNI CHECK
//	del    the CNI DEL, as StopPodSandbox
//	rmns   remove the namespace, as StopPodSandbox does after the DEL ({"closed": whether
//	       containerd would now find it gone})
//
// The plugins' standard error, where weft's plugin logs its delegate configuration, is
// passed through to its own.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/containerd/containerd/v2/pkg/netns"
	gocni "github.com/containerd/go-cni"
)

func main() {
	confDir := flag.String("conf-dir", gocni.DefaultNetDir, "the CNI configuration directory (containerd's conf_dir)")
	binDir := flag.String("bin-dir", gocni.DefaultCNIDir, "the CNI plugin directory (containerd's bin_dirs)")
	id := flag.String("id", "", "the pod sandbox's ID (CNI_CONTAINERID)")
	name := flag.String("name", "pod", "the pod's name (K8S_POD_NAME)")
	namespace := flag.String("namespace", "default", "the pod's Kubernetes namespace (K8S_POD_NAMESPACE)")
	uid := flag.String("uid", "", "the pod's UID (K8S_POD_UID)")
	dnsServers := flag.String("dns-servers", "", "comma-separated DNS servers of the pod's DNS config (the dns capability)")
	dnsSearches := flag.String("dns-searches", "", "comma-separated DNS search domains of the pod's DNS config")
	flag.Parse()
	if *id == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: wincni --id=SANDBOX [--conf-dir=DIR] [--bin-dir=DIR] [flags] <steps")
		os.Exit(2)
	}

	p := &pod{id: *id, labels: map[string]string{
		"K8S_POD_NAMESPACE":          *namespace,
		"K8S_POD_NAME":               *name,
		"K8S_POD_INFRA_CONTAINER_ID": *id,
		"K8S_POD_UID":                *uid,
		"IgnoreUnknown":              "1",
	}}
	if *dnsServers != "" || *dnsSearches != "" {
		p.dns = &gocni.DNS{Servers: split(*dnsServers), Searches: split(*dnsSearches)}
	}
	var err error
	// The CRI plugin's Windows initialisation (internal/cri/server/service_windows.go):
	// the loopback network is Windows' own, so one network suffices.
	p.cni, err = gocni.New(gocni.WithMinNetworkCount(1), gocni.WithPluginConfDir(*confDir),
		gocni.WithPluginMaxConfNum(1), gocni.WithPluginDir([]string{*binDir}))
	if err == nil {
		err = p.cni.Load(gocni.WithDefaultConf)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "wincni: loading the CNI configuration of %s: %v\n", *confDir, err)
		os.Exit(1)
	}
	if err := p.serve(context.Background(), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "wincni:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// pod is one pod sandbox's network, as the CRI plugin keeps it.
type pod struct {
	id     string
	labels map[string]string
	dns    *gocni.DNS
	cni    gocni.CNI
	ns     *netns.NetNS // nil until the netns step
}

// answer is one step's line of output.
type answer struct {
	Step   string `json:"step"`
	Error  string `json:"error,omitempty"`
	Netns  string `json:"netns,omitempty"`
	Result any    `json:"result,omitempty"`
	Closed *bool  `json:"closed,omitempty"`
}

// serve runs the steps read from in, one a line, writing an answer for each to out.
func (p *pod) serve(ctx context.Context, in io.Reader, out io.Writer) error {
	enc := json.NewEncoder(out)
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		step := strings.TrimSpace(lines.Text())
		if step == "" {
			continue
		}
		a := p.step(ctx, step)
		if err := enc.Encode(a); err != nil {
			return fmt.Errorf("writing the answer to %s: %w", step, err)
		}
	}
	return lines.Err()
}

func (p *pod) step(ctx context.Context, step string) answer {
	a := answer{Step: step}
	var err error
	switch step {
	case "netns":
		// The CRI plugin's sandbox start (sandbox_run.go): the base directory means
		// nothing on Windows.
		p.ns, err = netns.NewNetNS("")
		if err == nil {
			a.Netns = p.ns.GetPath()
		}
	case "add":
		var res *gocni.Result
		err = p.withNS(func(path string, opts []gocni.NamespaceOpts) error {
			var err error
			res, err = p.cni.Setup(ctx, p.id, path, opts...)
			return err
		})
		if err == nil {
			a.Result = res.Raw()
		}
	case "check":
		err = p.withNS(func(path string, opts []gocni.NamespaceOpts) error {
			return p.cni.Check(ctx, p.id, path, opts...)
		})
	case "del":
		err = p.withNS(func(path string, opts []gocni.NamespaceOpts) error {
			return p.cni.Remove(ctx, p.id, path, opts...)
		})
	case "rmns":
		if p.ns == nil {
			err = errors.New("no namespace: no netns step before")
			break
		}
		if err = p.ns.Remove(); err == nil {
			var closed bool
			closed, err = p.ns.Closed()
			a.Closed = &closed
		}
	default:
		err = fmt.Errorf("unknown step %q: want netns, add, check, del or rmns", step)
	}
	if err != nil {
		a.Error = err.Error()
	}
	return a
}

// withNS calls fn with the namespace's path and the CRI plugin's namespace options
// (sandbox_run.go's cniNamespaceOpts: the pod's labels, its annotations, its DNS config).
func (p *pod) withNS(fn func(path string, opts []gocni.NamespaceOpts) error) error {
	if p.ns == nil {
		return errors.New("no namespace: no netns step before")
	}
	opts := []gocni.NamespaceOpts{
		gocni.WithLabels(p.labels),
		// annotations.PodAnnotations, internal to containerd; only plugins that declare
		// the capability get it, and weft's does not.
		gocni.WithCapability("io.kubernetes.cri.pod-annotations", map[string]string{}),
	}
	if p.dns != nil {
		opts = append(opts, gocni.WithCapabilityDNS(*p.dns))
	}
	return fn(p.ns.GetPath(), opts)
}
