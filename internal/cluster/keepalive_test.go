package cluster_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
)

// TestHowEnded: a reset is ECONNRESET, EPIPE or EOF however wrapped; a read deadline is a stall.
func TestHowEnded(t *testing.T) {
	for _, c := range []struct {
		err  error
		want connEnd
	}{
		{&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, connReset},
		{&net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, connReset},
		{fmt.Errorf("reading the answer: %w", io.EOF), connReset},
		{io.ErrUnexpectedEOF, connReset},
		{&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, connStalled},
		{&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.EHOSTUNREACH)}, connOther},
	} {
		if got := howEnded(c.err); got != c.want {
			t.Errorf("howEnded(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
