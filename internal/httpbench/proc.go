package main

import "net"

// freePort is a loopback port nobody listened on a moment ago. A server
// started on it may still lose a race for it; the callers retry then.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
