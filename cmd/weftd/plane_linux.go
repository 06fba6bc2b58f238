package main

import (
	"flag"
	"log/slog"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/daemon"
	"github.com/weftnet/weft/linux"
	"github.com/weftnet/weft/linux/policy"
)

// planeFlags are the data plane's own flags on this OS: Linux has none.
type planeFlags struct{}

func (f *planeFlags) addFlags(*flag.FlagSet) {}

// platform is Linux's: the netlink planes (newPlane), and the kernel's routes.
func (f *planeFlags) platform(cfg daemon.Config) daemon.Platform {
	return daemon.Platform{
		OpenPlanes: func(log *slog.Logger) (backend.Plane, backend.Plane, error) { return f.newPlane(cfg, log) },
		DefaultIf:  linux.DefaultRouteInterface,
		RouteTo:    linux.RouteTo, // for --iface-can-reach
		Policy:     func(log *slog.Logger) daemon.PolicyPlane { return policy.New(log, nil) },
	}
}

// newPlane opens the netlink data planes of the namespace weftd runs in: one per family,
// each with its own sockets and model (an IPv4-only network never uses the second). Each
// runs the wireguard backend too when the network's config names it, over WireGuard devices
// the two share (one for both families in flannel's single-tunnel modes).
func (f *planeFlags) newPlane(cfg daemon.Config, log *slog.Logger) (backend.Plane, backend.Plane, error) {
	p4, err := linux.NewWireGuard(log)
	if err != nil {
		return nil, nil, err
	}
	p6, err := p4.Family(log.With("family", "IPv6"))
	if err != nil {
		p4.Close()
		return nil, nil, err
	}
	p4.SetMasqueradeFullyRandom(!cfg.IPMasqNotFullyRandom)
	p6.SetMasqueradeFullyRandom(!cfg.IPMasqNotFullyRandom)
	p4.SetForwardRules(cfg.ForwardRules)
	p6.SetForwardRules(cfg.ForwardRules)
	p4.SetBlackholeRoute(cfg.BlackholeRoute)
	p6.SetBlackholeRoute(cfg.BlackholeRoute)
	return p4, p6, nil
}
