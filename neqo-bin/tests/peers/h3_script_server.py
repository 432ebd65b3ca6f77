"""An HTTP/3 server on aioquic whose responses break what sloppy clients assume, each within
RFC 9114 or exactly against it, by path:

  /empty-data    200, content-length 12, its body in DATA frames with empty ones between
  /short         200, content-length 12, 6 bytes, then FIN
  /long          200, content-length 12, 13 bytes
  /early-hints   103 Early Hints, then 200 with a 5-byte body
  /ok            200, 2 bytes, no content-length
  anything else  404

It prints "h3-script-server listening on ADDR:PORT" once listening (it binds port 0 of the
address given) and serves until killed or until --limit seconds pass. Used by
neqo-bin/tests/h3_peers.rs.
"""

import argparse
import asyncio
import sys

from aioquic.asyncio import QuicConnectionProtocol, serve
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ProtocolNegotiated


def answer(path):
    """(interim heads, final head, DATA payloads) for a path."""
    twelve = [(b":status", b"200"), (b"content-length", b"12")]
    if path == b"/empty-data":
        return [], twelve, [b"", b"hello ", b"", b"world!", b""]
    if path == b"/short":
        return [], twelve, [b"hello "]
    if path == b"/long":
        return [], twelve, [b"hello world!!"]
    if path == b"/early-hints":
        hints = [(b":status", b"103"), (b"link", b"</style.css>; rel=preload; as=style")]
        return [hints], [(b":status", b"200"), (b"content-length", b"5")], [b"hints"]
    if path == b"/ok":
        return [], [(b":status", b"200")], [b"ok"]
    return [], [(b":status", b"404"), (b"content-length", b"0")], []


class Protocol(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = None

    def quic_event_received(self, event):
        if isinstance(event, ProtocolNegotiated):
            self.h3 = H3Connection(self._quic)
        if self.h3 is None:
            return
        for e in self.h3.handle_event(event):
            if isinstance(e, HeadersReceived):
                path = dict(e.headers).get(b":path", b"")
                interim, final, data = answer(path)
                for head in interim:
                    self.h3.send_headers(e.stream_id, head)
                self.h3.send_headers(e.stream_id, final, end_stream=not data)
                for i, chunk in enumerate(data):
                    self.h3.send_data(e.stream_id, chunk, end_stream=i == len(data) - 1)
        self.transmit()


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--limit", type=float, default=120.0)
    a = p.parse_args()
    config = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN)
    config.load_cert_chain(a.cert, a.key)
    server = await serve(a.host, 0, configuration=config, create_protocol=Protocol)
    port = server._transport.get_extra_info("sockname")[1]
    print(f"h3-script-server listening on {a.host}:{port}", flush=True)
    await asyncio.sleep(a.limit)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
