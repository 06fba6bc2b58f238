// Command weft is weft's CNI plugin, a drop-in for flannel's: the runtime runs it for every
// pod, and it hands the pod to a delegate plugin (bridge on Linux, win-overlay or win-bridge
// on Windows) configured from the node's subnet.env. See package cni.
package main

import (
	"context"
	"os"
	"runtime"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/weftnet/weft/cni"
)

// about is printed when the plugin is run without CNI_COMMAND.
const about = "weft CNI plugin (flannel-compatible)"

func main() {
	goos := cni.Linux
	if runtime.GOOS == "windows" {
		goos = cni.Windows
	}
	p := &cni.Plugin{OS: goos, Delegator: invoker{}, Log: os.Stderr}
	// Every version flannel's plugin takes, so that existing configurations (kube-flannel's
	// is 0.3.1, Windows ones 0.2.0) keep working; CHECK needs 0.4.0 and STATUS 1.1.0, which
	// skel enforces.
	skel.PluginMainFuncs(funcs(p), version.All, about)
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
