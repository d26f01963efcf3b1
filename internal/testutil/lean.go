package testutil

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/h1"
)

// LeanServer serves h on a loopback port as serve's plain listener does:
// the lean HTTP/1.1 server, with a net/http server behind it for the
// requests it hands off. It returns the base URL; everything stops when
// the test ends.
func LeanServer(tb testing.TB, h http.Handler) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	handed := h1.NewHandoff(ln.Addr())
	fallback := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	lean := &h1.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second, Fallback: handed.Give}
	var wg sync.WaitGroup
	wg.Go(func() { _ = handed.Serve(fallback) })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !lean.Go(c) {
				_ = c.Close()
			}
		}
	})
	tb.Cleanup(func() {
		_ = ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = lean.Shutdown(ctx)
		_ = handed.Drain(ctx)
		_ = fallback.Shutdown(ctx)
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// StatusLineServer serves every connection one HTTP/1.1 answer with the
// status line "HTTP/1.1 "+status (taken as it is, control bytes included)
// and an empty body, then closes it; it returns the server's base URL.
// Tests of what a command shows of an answer a client must not trust use
// it: net/http would refuse to write such a status line.
func StatusLineServer(tb testing.TB, status string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = bufio.NewReader(c).ReadString('\n')
				_, _ = io.WriteString(c, "HTTP/1.1 "+status+"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}
