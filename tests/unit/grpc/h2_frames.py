"""Raw HTTP/2 for tests that play a hostile or broken client: the connection preface
(RFC 9113 §3.4) and splitting what a server sent into frames."""

from __future__ import annotations

from hyperframe.frame import Frame

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frames_in(data: bytes) -> list[Frame]:
    frames = []
    view = memoryview(data)
    while len(view) >= 9:
        frame, length = Frame.parse_frame_header(view[:9])
        frame.parse_body(view[9 : 9 + length])
        frames.append(frame)
        view = view[9 + length :]
    return frames
