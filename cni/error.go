package cni

import (
	"errors"

	"github.com/containernetworking/cni/pkg/types"
)

// CNI error codes weft reports beyond the well-known ones of the CNI library (types.Err*).
const (
	// CodeSubnetChanged: CHECK found that subnet.env names another node subnet than the one
	// the container got its address from at ADD (weftd leased a new subnet since). The pod
	// must be recreated.
	CodeSubnetChanged uint = 100
	// CodeNotAvailable is CNI 1.1's "plugin not available": STATUS while subnet.env is
	// missing or unusable, so that the runtime holds pod creation back.
	CodeNotAvailable uint = 50
)

// Error is a failure together with the CNI error code the runtime is to see.
type Error struct {
	Code uint   // a types.Err* code or one of the codes above
	Msg  string // what failed, naming the file or key concerned
	Err  error  // the cause, if any
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Msg
	}
	return e.Msg + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// ToCNI turns an error of this package into the error a plugin prints: the code of the first
// *Error (or of a delegate's *types.Error) in its chain, and the whole message, so that the
// context added on the way up is not lost. Other errors get types.ErrInternal.
func ToCNI(err error) *types.Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return types.NewError(e.Code, err.Error(), "")
	}
	var te *types.Error
	if errors.As(err, &te) {
		return types.NewError(te.Code, err.Error(), "")
	}
	return types.NewError(types.ErrInternal, err.Error(), "")
}
