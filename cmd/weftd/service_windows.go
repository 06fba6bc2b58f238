package main

import (
	"context"
	"fmt"

	"golang.org/x/sys/windows/svc"
)

// serviceName is the name weftd is registered under:
//
//	sc.exe create weftd binPath= "C:\k\weftd.exe --iface=Ethernet ..." start= auto
const serviceName = "weftd"

// runAsService runs weftd under the service control manager when it was started by it;
// handled is false when weftd runs in a console (then the caller runs it itself).
func runAsService(run func(ctx context.Context) error) (handled bool, err error) {
	isService, err := svc.IsWindowsService()
	if err != nil {
		return false, fmt.Errorf("asking whether weftd runs as a service: %w", err)
	}
	if !isService {
		return false, nil
	}
	s := &service{run: run}
	if err := svc.Run(serviceName, s); err != nil {
		return true, fmt.Errorf("service %s: %w", serviceName, err)
	}
	return true, s.err
}

// service adapts weftd's run to the service control manager: Stop and Shutdown cancel it
// as SIGTERM does, leaving the data plane programmed.
type service struct {
	run func(ctx context.Context) error
	err error
}

func (s *service) Execute(_ []string, req <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	status <- svc.Status{State: svc.StartPending}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.run(ctx) }()
	status <- svc.Status{State: svc.Running, Accepts: svc.AcceptStop | svc.AcceptShutdown}
	for {
		select {
		case s.err = <-done:
			status <- svc.Status{State: svc.StopPending}
			if s.err != nil {
				return true, 1 // a service-specific exit code: weftd stopped on an error
			}
			return false, 0
		case c := <-req:
			switch c.Cmd {
			case svc.Interrogate:
				status <- c.CurrentStatus
			case svc.Stop, svc.Shutdown:
				status <- svc.Status{State: svc.StopPending}
				cancel()
				s.err = <-done
				return false, 0
			}
		}
	}
}
