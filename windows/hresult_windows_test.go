package windows

import (
	"errors"
	"syscall"
	"testing"

	"github.com/Microsoft/hcsshim/hcn"
	xwin "golang.org/x/sys/windows"
)

// TestHResultsAreWindows: the codes weft tells apart are x/sys/windows's, which only builds
// on Windows.
func TestHResultsAreWindows(t *testing.T) {
	for _, c := range []struct {
		ours   HResult
		theirs xwin.Handle
		name   string
	}{
		{HCNNetworkNotFound, xwin.HCN_E_NETWORK_NOT_FOUND, "HCN_E_NETWORK_NOT_FOUND"},
		{HCNEndpointNotFound, xwin.HCN_E_ENDPOINT_NOT_FOUND, "HCN_E_ENDPOINT_NOT_FOUND"},
		{HCNAdapterNotFound, xwin.HCN_E_ADAPTER_NOT_FOUND, "HCN_E_ADAPTER_NOT_FOUND"},
		{HCNPolicyNotFound, xwin.HCN_E_POLICY_NOT_FOUND, "HCN_E_POLICY_NOT_FOUND"},
		{HCNInvalidNetworkType, xwin.HCN_E_INVALID_NETWORK_TYPE, "HCN_E_INVALID_NETWORK_TYPE"},
		{HCNInvalidPolicy, xwin.HCN_E_INVALID_POLICY, "HCN_E_INVALID_POLICY"},
		{HCNInvalidPolicyType, xwin.HCN_E_INVALID_POLICY_TYPE, "HCN_E_INVALID_POLICY_TYPE"},
		{HCNNetworkAlreadyExists, xwin.HCN_E_NETWORK_ALREADY_EXISTS, "HCN_E_NETWORK_ALREADY_EXISTS"},
		{HCNPolicyAlreadyExists, xwin.HCN_E_POLICY_ALREADY_EXISTS, "HCN_E_POLICY_ALREADY_EXISTS"},
		{HCNPortAlreadyExists, xwin.HCN_E_PORT_ALREADY_EXISTS, "HCN_E_PORT_ALREADY_EXISTS"},
		{HCNEndpointAlreadyAttached, xwin.HCN_E_ENDPOINT_ALREADY_ATTACHED, "HCN_E_ENDPOINT_ALREADY_ATTACHED"},
		{HCNRequestUnsupported, xwin.HCN_E_REQUEST_UNSUPPORTED, "HCN_E_REQUEST_UNSUPPORTED"},
		{HCNInvalidJSON, xwin.HCN_E_INVALID_JSON, "HCN_E_INVALID_JSON"},
		{HCNInvalidIP, xwin.HCN_E_INVALID_IP, "HCN_E_INVALID_IP"},
		{HCNManagerStopped, xwin.HCN_E_MANAGER_STOPPED, "HCN_E_MANAGER_STOPPED"},
		{HCNEndpointNamespaceAlreadyExist, xwin.HCN_E_ENDPOINT_NAMESPACE_ALREADY_EXISTS, "HCN_E_ENDPOINT_NAMESPACE_ALREADY_EXISTS"},
		{HCNAddrInvalidOrReserved, xwin.HCN_E_ADDR_INVALID_OR_RESERVED, "HCN_E_ADDR_INVALID_OR_RESERVED"},
		{ElementNotFound, 0x80070000 | xwin.Handle(xwin.ERROR_NOT_FOUND), "HRESULT_FROM_WIN32(ERROR_NOT_FOUND)"},
		{InvalidArg, xwin.Handle(xwin.E_INVALIDARG), "E_INVALIDARG"},
		{NotImpl, xwin.Handle(xwin.E_NOTIMPL), "E_NOTIMPL"},
		{Fail, xwin.Handle(xwin.E_FAIL), "E_FAIL"},
		{RPCServerUnavailable, 0x80070000 | xwin.Handle(xwin.RPC_S_SERVER_UNAVAILABLE), "HRESULT_FROM_WIN32(RPC_S_SERVER_UNAVAILABLE)"},
	} {
		if uint32(c.ours) != uint32(c.theirs) {
			t.Errorf("%s: weft has %v, x/sys/windows %#x", c.name, c.ours, uint32(c.theirs))
		}
	}
}

// TestHNSErrorsByCode: the adapter classifies what hcsshim's calls return by HRESULT (an
// HCN code as it is, a Win32 one as hcsshim hands it back, facility stripped), and hcn's
// own not-found errors as ErrNotFound.
func TestHNSErrorsByCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		code HResult
		is   error
	}{
		{syscall.Errno(0x803B0001), HCNNetworkNotFound, ErrNotFound},
		{syscall.Errno(0x803B0008), HCNPolicyNotFound, ErrNotFound},
		{syscall.Errno(0x803B0014), HCNEndpointAlreadyAttached, ErrExists},
		{syscall.Errno(0x803B0020), HCNManagerStopped, ErrStopped},
		{syscall.Errno(xwin.ERROR_NOT_FOUND), ElementNotFound, ErrNotFound},
		{syscall.Errno(xwin.RPC_S_SERVER_UNAVAILABLE), RPCServerUnavailable, ErrStopped},
	} {
		got := hnsErr(c.err, "calling")
		if code, ok := CodeOf(got); !ok || code != c.code {
			t.Errorf("%v: code %v (%v), want %v", c.err, code, ok, c.code)
		}
		if !errors.Is(got, c.is) {
			t.Errorf("%v: %v does not match %v", c.err, got, c.is)
		}
	}
	if got := hnsErr(syscall.Errno(0x803B0001), "calling"); errors.Is(got, ErrExists) {
		t.Errorf("network not found matches ErrExists")
	}
	for _, err := range []error{hcn.NetworkNotFoundError{NetworkName: "flannel.4096"}, hcn.EndpointNotFoundError{EndpointID: "x"}} {
		if got := hnsErr(err, "looking"); !errors.Is(got, ErrNotFound) {
			t.Errorf("%v does not match ErrNotFound", got)
		}
	}
}
