"""The HTTP/REST frontend (KServe v2 + Triton extensions) over aiohttp, with a fast path for
plain ``/infer`` requests below aiohttp's ``web`` layer; inference goes through the pipeline."""
