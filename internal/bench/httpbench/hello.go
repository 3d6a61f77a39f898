package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
)

// helloMain is `httpbench hello`: the HTTP floor, a net/http server that
// reads each request's body and answers "hello". It prints
// addr=127.0.0.1:PORT once it listens.
func helloMain(args []string) int {
	fs := flag.NewFlagSet("hello", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	_ = fs.Parse(args)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpbench hello:", err)
		return 1
	}
	fmt.Printf("httpbench hello listening addr=%s\n", ln.Addr())
	err = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "hello\n")
	}))
	fmt.Fprintln(os.Stderr, "httpbench hello:", err)
	return 1
}

func numCPU() int { return runtime.NumCPU() }
