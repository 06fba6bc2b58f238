// Command weft is weft's CNI plugin, a drop-in for flannel's: the runtime runs it for every
// pod, and it hands the pod to a delegate plugin (bridge on Linux, win-overlay or win-bridge
// on Windows) configured from the node's subnet.env. See package cni.
//
// Run by hand (without CNI_COMMAND, which runtimes always set), it has two commands of its
// own: `weft install` puts the plugin and its configuration onto the node (package
// cni/install; the init container of weft's DaemonSet runs it), and `weft version`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/weftnet/weft/cni"
	"github.com/weftnet/weft/cni/install"
	"github.com/weftnet/weft/internal/buildinfo"
)

const usage = `weft: weft's CNI plugin. The container runtime runs it (with CNI_COMMAND set); by hand:

  weft install --conf=FILE [flags]   install this plugin and the CNI configuration FILE
  weft version                       weft's version
`

func main() {
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) > 1 {
		os.Exit(command(os.Args[1:], os.Stdout, os.Stderr))
	}
	goos := cni.Linux
	if runtime.GOOS == "windows" {
		goos = cni.Windows
	}
	p := &cni.Plugin{OS: goos, Delegator: invoker{}, Log: os.Stderr}
	// Every version flannel's plugin takes, so that existing configurations (kube-flannel's
	// is 0.3.1, Windows ones 0.2.0) keep working; CHECK needs 0.4.0 and STATUS 1.1.0, which
	// skel enforces. skel prints the last argument when the plugin is run with neither
	// CNI_COMMAND nor arguments.
	skel.PluginMainFuncs(funcs(p), version.All, "weft CNI plugin (flannel-compatible) "+buildinfo.Version())
}

// command runs one of the plugin's own commands and returns the exit status.
func command(args []string, stdout, stderr io.Writer) int {
	switch args[0] {
	case "install":
		o := install.DefaultOptions()
		fs := flag.NewFlagSet("weft install", flag.ContinueOnError)
		fs.SetOutput(stderr)
		o.AddFlags(fs)
		if err := fs.Parse(args[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "weft install: unexpected arguments %q\n", fs.Args())
			return 2
		}
		if err := install.Run(o, slog.New(slog.NewTextHandler(stderr, nil))); err != nil {
			fmt.Fprintln(stderr, "weft install:", err)
			return 1
		}
		return 0
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, buildinfo.String("weft"))
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "weft: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// funcs adapts the plugin to skel: results are printed in the delegate's version (that of
// the configuration), errors carry their CNI code.
func funcs(p *cni.Plugin) skel.CNIFuncs {
	ctx := context.Background()
	return skel.CNIFuncs{
		Add: func(a *skel.CmdArgs) error {
			res, err := p.Add(ctx, args(a))
			if err != nil {
				return toCNI(err)
			}
			return res.Print()
		},
		Check: func(a *skel.CmdArgs) error { return toCNI(p.Check(ctx, args(a))) },
		Del:   func(a *skel.CmdArgs) error { return toCNI(p.Del(ctx, args(a))) },
		Status: func(a *skel.CmdArgs) error {
			return toCNI(p.Status(ctx, args(a)))
		},
	}
}

func args(a *skel.CmdArgs) cni.Args {
	return cni.Args{ContainerID: a.ContainerID, Netns: a.Netns, StdinData: a.StdinData}
}

// toCNI keeps a nil error nil: a nil *types.Error in an error interface is not.
func toCNI(err error) error {
	if err == nil {
		return nil
	}
	return cni.ToCNI(err)
}

// invoker runs delegates found in CNI_PATH, with this invocation's environment.
type invoker struct{}

func (invoker) Add(ctx context.Context, plugin string, conf []byte) (types.Result, error) {
	return invoke.DelegateAdd(ctx, plugin, conf, nil)
}

func (invoker) Check(ctx context.Context, plugin string, conf []byte) error {
	return invoke.DelegateCheck(ctx, plugin, conf, nil)
}

func (invoker) Del(ctx context.Context, plugin string, conf []byte) error {
	return invoke.DelegateDel(ctx, plugin, conf, nil)
}
