package faultproxy

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers each line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends one line through c and reads the echo.
func roundTrip(c net.Conn, line string) (string, error) {
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	return got, err
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial the proxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCutRestoreClose(t *testing.T) {
	t.Parallel()
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })

	before := dial(t, p.Addr())
	if got, err := roundTrip(before, "hello"); err != nil || got != "hello\n" {
		t.Fatalf("through the proxy: %q, %v; want the echo", got, err)
	}

	if n := p.Cut(); n != 1 {
		t.Errorf("Cut cut %d links, want the 1 open", n)
	}
	if got, err := roundTrip(before, "after the cut"); err == nil {
		t.Fatalf("an open connection still works after Cut: %q", got)
	}
	during := dial(t, p.Addr()) // accepted, then closed at once
	if got, err := roundTrip(during, "during the cut"); err == nil {
		t.Fatalf("a new connection works while cut: %q", got)
	}

	p.Restore()
	after := dial(t, p.Addr())
	if got, err := roundTrip(after, "restored"); err != nil || got != "restored\n" {
		t.Fatalf("after Restore: %q, %v; want the echo", got, err)
	}

	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got, err := roundTrip(after, "closed"); err == nil {
		t.Fatalf("a connection works after Close: %q", got)
	}
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		c.Close()
		t.Fatal("the proxy still accepts connections after Close")
	}
}
