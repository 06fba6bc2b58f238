package windows

import (
	"errors"
	"strings"
	"testing"

	"github.com/weftnet/weft/subnet"
)

// TestWireGuardRefused: a wireguard network config stops weftd on Windows with an error naming
// the backend type and why, as flanneld, which has no wireguard backend there, stops.
func TestWireGuardRefused(t *testing.T) {
	cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard"}}`))
	if err != nil {
		t.Fatal(err)
	}
	err = Capabilities().Check(cfg)
	var ce *subnet.ConfigError
	if !errors.As(err, &ce) || ce.Key != "Backend.Type" || ce.Value != "wireguard" || !strings.Contains(ce.Reason, "Windows") {
		t.Errorf("Check: %v, want Backend.Type=wireguard refused on Windows", err)
	}
}
