package h1

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// rawEcho serves requests to /raw from their bytes (echoing the field
// lines and the body, or panicking for /raw/panic) and declines the rest,
// which which serves.
type rawEcho struct{ http.HandlerFunc }

func (rawEcho) ServeRaw(w http.ResponseWriter, rq *RawRequest) bool {
	if !strings.HasPrefix(rq.Target, "/raw") {
		return false
	}
	if rq.Target == "/raw/panic" {
		panic(http.ErrAbortHandler)
	}
	body, err := io.ReadAll(rq.Body)
	if err != nil || int64(len(body)) != rq.ContentLength || rq.Context().Err() != nil || rq.RemoteAddr == "" {
		http.Error(w, "bad body or context", http.StatusInternalServerError)
		return true
	}
	w.Header().Set("X-Served", "raw")
	_, _ = io.WriteString(w, rq.Method+" "+rq.Target+"\n"+rq.Fields+"|"+string(body))
	return true
}

// TestRawServer: a handler with ServeRaw sees the request's field lines as
// sent and its body; a request it declines reaches ServeHTTP whole (its
// header map built then, without Host, its body unread); a panic in
// ServeRaw closes the connection as one in ServeHTTP does.
func TestRawServer(t *testing.T) {
	t.Parallel()
	l := startLean(t, rawEcho{which}, nil)
	conn := l.dial(t)
	br := bufio.NewReader(conn)
	send := func(target, fields, body string) (*http.Response, string) {
		t.Helper()
		req := "POST " + target + " HTTP/1.1\r\nHost: h\r\n" + fields + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(data)
	}
	resp, got := send("/raw?q", "x-lower: a\r\nX-Two: 1\r\nx-two:  2 \r\n", "hello")
	want := "POST /raw?q\nHost: h\r\nx-lower: a\r\nX-Two: 1\r\nx-two:  2 \r\nContent-Length: 5\r\n|hello"
	if got != want || resp.Header.Get("X-Served") != "raw" {
		t.Fatalf("served from bytes: %q %v, want %q", got, resp.Header, want)
	}
	// Declined: the same request as an http.Request, on the same connection.
	resp, got = send("/other", "x-lower: a\r\n", "body")
	if got != "POST /other 4 body" || resp.Header.Get("X-Writer") != leanWriter || resp.Header.Get("X-Host") != "h" {
		t.Fatalf("declined: %q %v", got, resp.Header)
	}
	// A declined request's map holds its fields, canonical, Host aside.
	l2 := startLean(t, rawEcho{func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Join([]string{r.Header.Get("X-Lower"), strings.Join(r.Header.Values("X-Two"), ","),
			r.Header.Get("Host"), r.Header.Get("Content-Length")}, "|"))
	}}, nil)
	c := l2.dial(t)
	br = bufio.NewReader(c)
	if _, err := io.WriteString(c, "POST /x HTTP/1.1\r\nHost: h\r\nx-lower: a\r\nX-Two: 1\r\nx-two: 2\r\nContent-Length: 0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r2, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(r2.Body)
	if string(data) != "a|1,2||0" {
		t.Fatalf("declined request's header map: %q", data)
	}
	// A panic closes the connection.
	p := l.dial(t)
	if _, err := io.WriteString(p, "POST /raw/panic HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(p); len(rest) != 0 {
		t.Fatalf("a panicking ServeRaw answered %q", rest)
	}
}

// TestSetField: fields set through SetField go out with the head as map
// entries would (a repeat replaces, the map's own entry of a name wins), a
// relayed answer's line of such a name is not relayed, and none is taken
// once the head is written.
func TestSetField(t *testing.T) {
	t.Parallel()
	l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fs := w.(FieldSetter)
		if !fs.SetField("X-Own", "first") || !fs.SetField("X-Own", "second") || !fs.SetField("X-Both", "own") {
			t.Error("SetField refused a field")
		}
		if fs.SetField("X-Third", "x") {
			t.Error("SetField took more fields than it holds")
		}
		w.Header().Set("X-Both", "map")
		w.(FieldsWriter).WriteHeaderFields(http.StatusOK, "X-Own: relayed\r\nX-Relayed: yes\r\n", func(string) bool { return true })
		if fs.SetField("X-Late", "x") {
			t.Error("SetField took a field after the head")
		}
		_, _ = io.WriteString(w, "ok")
	}), nil)
	resp, err := l.client(t).Get("http://" + l.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	h := resp.Header
	if got := [][]string{h.Values("X-Own"), h.Values("X-Both"), h.Values("X-Relayed"), h.Values("X-Late")}; fmt.Sprint(got) != "[[second] [map] [yes] []]" {
		t.Fatalf("fields %v", got)
	}
}
