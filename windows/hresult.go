package windows

import (
	"encoding/json"
	"errors"
	"fmt"
)

// HResult is the status code an HNS call returns. HNS's own codes are in facility 0x3B
// (FACILITY_HCN); it also returns Win32 errors as HRESULTs (facility 7).
type HResult uint32

// The codes weft tells apart. Their names are x/sys/windows's (which only builds on
// Windows; hresult_windows_test.go checks that the values agree).
const (
	HCNNetworkNotFound               HResult = 0x803B0001 // HCN_E_NETWORK_NOT_FOUND
	HCNEndpointNotFound              HResult = 0x803B0002 // HCN_E_ENDPOINT_NOT_FOUND
	HCNAdapterNotFound               HResult = 0x803B0006 // HCN_E_ADAPTER_NOT_FOUND
	HCNPolicyNotFound                HResult = 0x803B0008 // HCN_E_POLICY_NOT_FOUND
	HCNInvalidNetworkType            HResult = 0x803B000B // HCN_E_INVALID_NETWORK_TYPE
	HCNInvalidPolicy                 HResult = 0x803B000D // HCN_E_INVALID_POLICY
	HCNInvalidPolicyType             HResult = 0x803B000E // HCN_E_INVALID_POLICY_TYPE
	HCNNetworkAlreadyExists          HResult = 0x803B0010 // HCN_E_NETWORK_ALREADY_EXISTS
	HCNPolicyAlreadyExists           HResult = 0x803B0012 // HCN_E_POLICY_ALREADY_EXISTS
	HCNPortAlreadyExists             HResult = 0x803B0013 // HCN_E_PORT_ALREADY_EXISTS
	HCNEndpointAlreadyAttached       HResult = 0x803B0014 // HCN_E_ENDPOINT_ALREADY_ATTACHED
	HCNRequestUnsupported            HResult = 0x803B0015 // HCN_E_REQUEST_UNSUPPORTED
	HCNInvalidJSON                   HResult = 0x803B001B // HCN_E_INVALID_JSON
	HCNInvalidIP                     HResult = 0x803B001E // HCN_E_INVALID_IP
	HCNManagerStopped                HResult = 0x803B0020 // HCN_E_MANAGER_STOPPED
	HCNEndpointNamespaceAlreadyExist HResult = 0x803B002B // HCN_E_ENDPOINT_NAMESPACE_ALREADY_EXISTS
	HCNAddrInvalidOrReserved         HResult = 0x803B002F // HCN_E_ADDR_INVALID_OR_RESERVED
	Fail                             HResult = 0x80004005 // E_FAIL
	ElementNotFound                  HResult = 0x80070490 // ERROR_NOT_FOUND as an HRESULT
	InvalidArg                       HResult = 0x80070057 // E_INVALIDARG
	NotImpl                          HResult = 0x80004001 // E_NOTIMPL
	// RPCServerUnavailable is what a call returns while the HNS service is not running (the
	// RPC to it fails): RPC_S_SERVER_UNAVAILABLE as an HRESULT.
	RPCServerUnavailable HResult = 0x800706BA
)

func (c HResult) String() string { return fmt.Sprintf("0x%08X", uint32(c)) }

// Error is HNS's answer to a failed call: the HRESULT and the error record that came with
// it, and what weft asked. Callers tell errors apart with errors.Is against ErrNotFound,
// ErrExists, ErrNotSupported and ErrStopped, which look at the code alone: the record's
// text is in the language of the Windows installation.
type Error struct {
	Op     string  // what weft asked, such as `creating HNS network "flannel.4096"`
	Code   HResult // the call's HRESULT
	Record string  // the error record (JSON) HNS returned, "" if none
}

// ErrorRecord is the JSON error record an HCN call returns beside a failed HRESULT: the
// code again and a message. The shape is the Host Compute Service's result document
// (hcsshim internal/hcs/errors.go, hcsResult); that HNS's is the same is unverified.
type ErrorRecord struct {
	Error        int32
	ErrorMessage string `json:",omitempty"`
}

func (e *Error) Error() string {
	msg := ""
	var rec ErrorRecord
	if e.Record != "" && json.Unmarshal([]byte(e.Record), &rec) == nil && rec.ErrorMessage != "" {
		msg = ": " + rec.ErrorMessage
	} else if e.Record != "" {
		msg = ": " + e.Record
	}
	return fmt.Sprintf("%s: HNS %s%s", e.Op, e.Code, msg)
}

// Is reports whether e means target: ErrNotFound, ErrExists, ErrNotSupported or ErrStopped.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		switch e.Code {
		case HCNNetworkNotFound, HCNEndpointNotFound, HCNPolicyNotFound, ElementNotFound:
			return true
		}
	case ErrExists:
		switch e.Code {
		case HCNNetworkAlreadyExists, HCNPolicyAlreadyExists, HCNPortAlreadyExists, HCNEndpointAlreadyAttached, HCNEndpointNamespaceAlreadyExist:
			return true
		}
	case ErrNotSupported:
		switch e.Code {
		case NotImpl, HCNRequestUnsupported, HCNInvalidNetworkType, HCNInvalidPolicyType:
			return true
		}
	case ErrStopped:
		switch e.Code {
		case HCNManagerStopped, RPCServerUnavailable:
			return true
		}
	}
	return false
}

// NewError returns the error of an HNS call that returned code, with an error record
// carrying message, as HNS writes one.
func NewError(op string, code HResult, message string) *Error {
	rec, _ := json.Marshal(ErrorRecord{Error: int32(code), ErrorMessage: message}) // cannot fail
	return &Error{Op: op, Code: code, Record: string(rec)}
}

// CodeOf returns the HRESULT of an HNS error, and false for any other error.
func CodeOf(err error) (HResult, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Code, true
	}
	return 0, false
}
