package windows

import (
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/Microsoft/hcsshim/hcn"
	xwin "golang.org/x/sys/windows"
)

// HCN is the Client of a real HNS: hcsshim's hcn package, which calls computenetwork.dll
// (and vmcompute.dll for the version). Objects cross between weft's model and hcn's types
// as JSON, which both write the same way (see hcn_windows_test.go).
type HCN struct {
	hnsCall *xwin.LazyProc // HNS v1, which hcn has no call of
}

var _ Client = HCN{}

// NewHCN returns the client. It does not ask HNS anything: HNS may not be running yet (a
// weftd started before it), and hcn caches the answer of its feature probe for the life of
// the process. Version asks afresh each time, and the plane's Prepare, which the lease
// acquisition retries, starts with it.
func NewHCN() HCN {
	return HCN{hnsCall: xwin.NewLazySystemDLL("vmcompute.dll").NewProc("HNSCall")}
}

// convert moves a value between weft's model and hcn's types through their common JSON.
func convert[T any](v any) (*T, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %T: %w", v, err)
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("decoding %s into %T: %w", b, out, err)
	}
	return out, nil
}

// hnsErr turns an hcn error into an *Error carrying HNS's HRESULT, so that callers tell
// errors apart by code (errors.Is with ErrNotFound, ErrExists, ErrNotSupported, ErrStopped)
// and never by the message, which is in the language of the Windows installation. hcn's
// own errors (an empty listing by name or ID) match ErrNotFound.
func hnsErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	op := fmt.Sprintf(format, args...)
	if code, ok := hresultOf(err); ok {
		return &Error{Op: op, Code: code, Record: err.Error()}
	}
	if hcn.IsNotFoundError(err) {
		return fmt.Errorf("%s: %w: %w", op, ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// hresultOf returns the HRESULT of an error from an HNS call. hcsshim's generated calls
// return it as a syscall.Errno, with the HRESULTs of Win32 errors (facility 7) turned back
// into the Win32 code, which this turns into the HRESULT again.
func hresultOf(err error) (HResult, bool) {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		var he *hcn.HcnError
		if !errors.As(err, &he) || he.HcsError == nil || !errors.As(he.Err, &errno) {
			return 0, false
		}
	}
	if errno <= 0xFFFF {
		return HResult(0x80070000 | uint32(errno)), true
	}
	return HResult(uint32(errno)), true
}

// Version implements Client.
func (HCN) Version() (Version, error) {
	g, err := hcn.GetGlobals() // not cached, unlike hcn's feature checks
	if err != nil {
		return Version{}, hnsErr(err, "HNS version")
	}
	v := Version{Major: g.Version.Major, Minor: g.Version.Minor}
	if !v.AtLeast(9, 2) {
		return Version{}, fmt.Errorf("HNS %s has no v2 API (HNS 9.2, Windows Server 2019 or later): %w", v, ErrNotSupported)
	}
	return v, nil
}

// NetworkByName implements Client.
func (HCN) NetworkByName(name string) (*HostComputeNetwork, error) {
	n, err := hcn.GetNetworkByName(name)
	if err != nil {
		return nil, hnsErr(err, "HNS network %q", name)
	}
	return convert[HostComputeNetwork](n)
}

// CreateNetwork implements Client.
func (HCN) CreateNetwork(n *HostComputeNetwork) (*HostComputeNetwork, error) {
	hn, err := convert[hcn.HostComputeNetwork](n)
	if err != nil {
		return nil, err
	}
	made, err := hn.Create()
	if err != nil {
		return nil, hnsErr(err, "creating HNS network %q", n.Name)
	}
	return convert[HostComputeNetwork](made)
}

// DeleteNetwork implements Client.
func (HCN) DeleteNetwork(id string) error {
	return hnsErr((&hcn.HostComputeNetwork{Id: id}).Delete(), "deleting HNS network %s", id)
}

// ModifyNetworkSettings implements Client.
func (HCN) ModifyNetworkSettings(networkID string, req *ModifyNetworkSettingRequest) error {
	r, err := convert[hcn.ModifyNetworkSettingRequest](req)
	if err != nil {
		return err
	}
	return hnsErr((&hcn.HostComputeNetwork{Id: networkID}).ModifyNetworkSettings(r), "modifying HNS network %s", networkID)
}

// NetworkEndpoints implements Client.
func (HCN) NetworkEndpoints(networkID string) ([]HostComputeEndpoint, error) {
	eps, err := hcn.ListEndpointsOfNetwork(networkID)
	if err != nil {
		return nil, hnsErr(err, "endpoints of HNS network %s", networkID)
	}
	out, err := convert[[]HostComputeEndpoint](eps)
	if err != nil {
		return nil, err
	}
	return *out, nil
}

// CreateEndpoint implements Client.
func (HCN) CreateEndpoint(ep *HostComputeEndpoint) (*HostComputeEndpoint, error) {
	he, err := convert[hcn.HostComputeEndpoint](ep)
	if err != nil {
		return nil, err
	}
	made, err := he.Create()
	if err != nil {
		return nil, hnsErr(err, "creating HNS endpoint %q", ep.Name)
	}
	return convert[HostComputeEndpoint](made)
}

// DeleteEndpoint implements Client.
func (HCN) DeleteEndpoint(id string) error {
	return hnsErr((&hcn.HostComputeEndpoint{Id: id}).Delete(), "deleting HNS endpoint %s", id)
}

// ModifyEndpointSettings implements Client.
func (HCN) ModifyEndpointSettings(endpointID string, req *ModifyEndpointSettingRequest) error {
	r, err := convert[hcn.ModifyEndpointSettingRequest](req)
	if err != nil {
		return err
	}
	return hnsErr(hcn.ModifyEndpointSettings(endpointID, r), "modifying HNS endpoint %s", endpointID)
}

// HostAttach implements Client with HNS v1's call, vmcompute.dll's HNSCall, sending what
// hcsshim's HNSEndpoint.HostAttach(1) sends. It is called here, not through hcsshim, whose
// v1 errors hide the HRESULT from errors.As (internal/hcserror's HcsError has no Unwrap):
// an endpoint attached already must be told by its code.
func (c HCN) HostAttach(endpointID string) error {
	body, err := json.Marshal(HostAttachRequest())
	if err != nil {
		return fmt.Errorf("encoding a host attach request: %w", err)
	}
	return c.v1Call("POST", "/endpoints/"+endpointID+"/attach", string(body), "attaching HNS endpoint "+endpointID+" to the host")
}

// v1Call makes one call of HNS v1: HNSCall(method, path, request, &response) returns an
// HRESULT, and on success a response {"Success":…,"Error":…,"Output":…} (hcsshim
// internal/hns/hnsfuncs.go) in a CoTaskMemAlloc'ed string the caller frees.
func (c HCN) v1Call(method, path, request, op string) error {
	if err := c.hnsCall.Find(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	var ws [3]*uint16
	for i, s := range []string{method, path, request} {
		var err error
		if ws[i], err = syscall.UTF16PtrFromString(s); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	var out *uint16
	// The pointers are converted in the call's arguments, which keeps them alive through it.
	r, _, _ := c.hnsCall.Call(uintptr(unsafe.Pointer(ws[0])), uintptr(unsafe.Pointer(ws[1])), uintptr(unsafe.Pointer(ws[2])), uintptr(unsafe.Pointer(&out)))
	response := ""
	if out != nil {
		response = xwin.UTF16PtrToString(out)
		xwin.CoTaskMemFree(unsafe.Pointer(out))
	}
	if int32(r) < 0 {
		return &Error{Op: op, Code: HResult(uint32(r)), Record: response}
	}
	var answer struct {
		Success bool
		Error   string
	}
	if err := json.Unmarshal([]byte(response), &answer); err != nil {
		return fmt.Errorf("%s: HNS answered %q: %w", op, response, err)
	}
	if !answer.Success {
		return fmt.Errorf("%s: HNS: %s", op, answer.Error)
	}
	return nil
}
