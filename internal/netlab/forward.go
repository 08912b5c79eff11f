package netlab

import (
	"io"
	"net"
)

// Forward accepts connections on addr inside namespace ns and relays each to target, dialled
// from the caller's (the host's) namespace: a way into the host's loopback that configures
// nothing there. The listener closes at cleanup.
func Forward(t T, ns, addr, target string) error {
	var l net.Listener
	if err := In(ns, func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		return err
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); _ = up.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return nil
}
