# An HTTP/2 client of the event bus listener built on hyper-h2 (Debian's
# python3-h2), a peer that does not share Go's HTTP/2 stack. The test drives
# it with one JSON command a line on stdin and reads one JSON event a line on
# stdout: every frame-level event h2 reports, as the peer saw it.
#
# usage: h2peer.py HOST:PORT CA_FILE [CLIENT_CERT CLIENT_KEY]
import base64, json, select, socket, ssl, sys, threading, time
import h2.config, h2.connection, h2.events, h2.exceptions

addr, cafile = sys.argv[1], sys.argv[2]
host, port = addr.rsplit(":", 1)
out_lock = threading.Lock()


def emit(**ev):
    with out_lock:
        sys.stdout.write(json.dumps(ev) + "\n")
        sys.stdout.flush()


ctx = ssl.create_default_context(cafile=cafile)
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
ctx.set_alpn_protocols(["h2"])
if len(sys.argv) > 4:
    ctx.load_cert_chain(sys.argv[3], sys.argv[4])
sock = ctx.wrap_socket(socket.create_connection((host, int(port))), server_hostname=host)
emit(ev="tls", version=sock.version(), alpn=sock.selected_alpn_protocol())

conn = h2.connection.H2Connection(config=h2.config.H2Configuration(
    client_side=True, header_encoding="utf-8"))
conn.initiate_connection()
lock = threading.Lock()
# Streams whose received data is not acknowledged (their window is not
# given back), to see the router's send side stop at the peer's window.
held = set()
# Commands sent before the first server frame is read: the peer then has
# only the defaults of RFC 9113 (a 65,535-byte stream window).
early = True


def flush():
    data = conn.data_to_send()
    if data:
        sock.sendall(data)


def describe(ev):
    if isinstance(ev, h2.events.RemoteSettingsChanged):
        return dict(ev="settings", values={str(int(k)): v.new_value for k, v in ev.changed_settings.items()})
    if isinstance(ev, h2.events.SettingsAcknowledged):
        return dict(ev="settings_ack")
    if isinstance(ev, h2.events.ResponseReceived):
        return dict(ev="response", stream=ev.stream_id, headers=dict(ev.headers))
    if isinstance(ev, h2.events.DataReceived):
        return dict(ev="data", stream=ev.stream_id, data=base64.b64encode(ev.data).decode(), ended=ev.stream_ended is not None)
    if isinstance(ev, h2.events.StreamEnded):
        return dict(ev="ended", stream=ev.stream_id)
    if isinstance(ev, h2.events.StreamReset):
        return dict(ev="reset", stream=ev.stream_id, code=int(ev.error_code), remote=ev.remote_reset)
    if isinstance(ev, h2.events.WindowUpdated):
        return dict(ev="window", stream=ev.stream_id, delta=ev.delta)
    if isinstance(ev, h2.events.PingReceived):
        return dict(ev="ping", data=ev.ping_data.hex())
    if isinstance(ev, h2.events.PingAckReceived):
        return dict(ev="ping_ack", data=ev.ping_data.hex())
    if isinstance(ev, h2.events.ConnectionTerminated):
        return dict(ev="goaway", code=int(ev.error_code), last_stream=ev.last_stream_id)
    return dict(ev="other", what=type(ev).__name__)


def reader():
    while True:
        r, _, _ = select.select([sock], [], [], 0.05)
        with lock:
            if not r:
                flush()
                continue
            try:
                data = sock.recv(65536)
            except OSError as e:
                emit(ev="eof", err=str(e))
                return
            if not data:
                emit(ev="eof", err="")
                return
            try:
                events = conn.receive_data(data)
            except h2.exceptions.ProtocolError as e:
                emit(ev="protocol_error", err=str(e))
                return
            for ev in events:
                emit(**describe(ev))
                if isinstance(ev, h2.events.DataReceived) and ev.stream_id not in held:
                    conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                if isinstance(ev, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
                    pump_out()
            flush()


def run(cmd):
    op = cmd["op"]
    if op == "request":
        sid = conn.get_next_available_stream_id()
        hdrs = [(":method", cmd.get("method", "POST")), (":scheme", "https"), (":authority", addr), (":path", cmd["path"])]
        hdrs += [(k, v) for k, v in cmd.get("headers", {}).items()]
        body = base64.b64decode(cmd.get("body") or "")
        conn.send_headers(sid, hdrs, end_stream=cmd.get("end", False) and not body)
        if body:
            send(sid, body, cmd.get("end", False))
        emit(ev="opened", stream=sid, early=early)
    elif op == "data":
        send(cmd["stream"], base64.b64decode(cmd.get("body") or ""), cmd.get("end", False), cmd.get("force", False))
    elif op == "hold":
        held.add(cmd["stream"])
    elif op == "reset":
        conn.reset_stream(cmd["stream"], cmd.get("code", 8))
    elif op == "ping":
        conn.ping(bytes.fromhex(cmd["data"]))
    elif op == "windows":
        sid = cmd["stream"]
        emit(ev="windows", stream=sid, send=conn.local_flow_control_window(sid), conn=conn.outbound_flow_control_window,
             recv=conn.remote_flow_control_window(sid))
    flush()


# What a stream has yet to send, [body, end], sent as its window allows.
outbound = {}


def send(sid, body, end, force=False):
    if force:
        # Past the window the router advertised: h2 itself would refuse.
        conn.outbound_flow_control_window += len(body)
        conn.streams[sid].outbound_flow_control_window += len(body)
    q = outbound.setdefault(sid, [b"", False])
    q[0] += body
    q[1] = q[1] or end
    pump_out()


def pump_out():
    for sid, q in list(outbound.items()):
        if sid not in conn.streams or conn.streams[sid].closed:
            del outbound[sid]
            continue
        while True:
            n = min(len(q[0]), conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
            if n == 0 and q[0]:
                break
            last = n == len(q[0])
            if n or (last and q[1]):
                conn.send_data(sid, q[0][:n], end_stream=last and q[1])
            q[0] = q[0][n:]
            if last:
                del outbound[sid]
                break


with lock:
    flush()
    # A first batch of commands may be given before anything was read.
    first = json.loads(sys.stdin.readline())
    for cmd in first:
        run(cmd)
    early = False
threading.Thread(target=reader, daemon=True).start()
emit(ev="ready")
for line in sys.stdin:
    if not line.strip():
        continue
    with lock:
        try:
            run(json.loads(line))
        except Exception as e:
            emit(ev="cmd_error", err="%s: %s" % (type(e).__name__, e))
