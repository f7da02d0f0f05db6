#!/usr/bin/env python3
"""Baton client-matrix driver for confluent-kafka-python (librdkafka).

Produces the records that test/clients (python.go) asks for and prints one
JSON line per delivery callback on stdout:
{"seq":N,"key":K,"partition":P,"offset":O} on success,
{"seq":N,"key":K,"error":E} on failure. Logs go to stderr.

Usage: produce.py '<json config>' where the config has client, bootstrap,
topic, records, rate, idempotent, compression, headers, keyPrefix, for a
paused run, pauseAt and resumeFile (records from pauseAt on wait until
resumeFile exists) and, optionally, security (see security_config).

With BATON_RDKAFKA_DEBUG set (librdkafka debug contexts, e.g. "eos,msg"),
librdkafka's debug log goes to <BATON_RDKAFKA_LOG_DIR or the working
directory>/<keyPrefix>.rdkafka.log: what the client decided on each answer.
"""

import json
import logging
import os
import sys
import time

try:
    from confluent_kafka import Producer
except ImportError as e:  # the venv is missing or incomplete
    print(
        f"produce.py: confluent-kafka is not importable ({e}); "
        "run test/clients/install.sh (python venv + pip install -r requirements.txt)",
        file=sys.stderr,
    )
    sys.exit(3)


def security_config(sec):
    """librdkafka properties for the config's security (absent: none):
    TLS with a CA and, for mTLS, a client certificate; SASL PLAIN, SCRAM or
    OAUTHBEARER, whose given token oauth_cb hands out with its principal and
    expiry."""
    if not sec:
        return {}
    conf = {"security.protocol": sec["protocol"].lower()}
    if sec.get("caFile"):
        conf["ssl.ca.location"] = sec["caFile"]
    if sec.get("certFile"):
        conf["ssl.certificate.location"] = sec["certFile"]
        conf["ssl.key.location"] = sec["keyFile"]
    mech = sec.get("mechanism")
    if mech:
        conf["sasl.mechanisms"] = mech
        if mech == "OAUTHBEARER":
            token = sec["token"]
            expires = sec["expiresMs"] / 1000.0
            principal = sec.get("principal") or "baton"
            conf["oauth_cb"] = lambda _config: (token, expires, principal)
        else:
            conf["sasl.username"] = sec["user"]
            conf["sasl.password"] = sec["password"]
    return conf


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: produce.py <json config>", file=sys.stderr)
        return 2
    cfg = json.loads(sys.argv[1])
    n = int(cfg["records"])
    rate = int(cfg.get("rate") or 0)
    prefix = cfg.get("keyPrefix", "")
    client = cfg.get("client") or "python"
    topic = cfg["topic"]
    out = sys.stdout

    def on_error(err):
        print(f"produce.py: client error: {err}", file=sys.stderr, flush=True)

    conf = {
        "bootstrap.servers": cfg["bootstrap"],
        "client.id": f"baton-{client}",
        "acks": "all",
        "enable.idempotence": bool(cfg.get("idempotent")),
        "compression.type": cfg.get("compression") or "none",
        "error_cb": on_error,
    }
    conf.update(security_config(cfg.get("security")))
    debug = os.environ.get("BATON_RDKAFKA_DEBUG")
    if debug:
        log_dir = os.environ.get("BATON_RDKAFKA_LOG_DIR") or "."
        logger = logging.getLogger("rdkafka")
        handler = logging.FileHandler(os.path.join(log_dir, f"{prefix or client}.rdkafka.log"))
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        conf["debug"] = debug
        conf["logger"] = logger
    producer = Producer(conf)

    def delivery(seq, key):
        def cb(err, msg):
            rec = {"seq": seq, "key": key}
            if err is not None:
                rec["error"] = str(err)
            else:
                rec["partition"] = msg.partition()
                # None is librdkafka's -1001, "offset unknown": messages
                # implicitly acked by a later batch's success (an idempotent
                # batch whose own answer was lost), a success without an
                # offset, as kcat reports it.
                off = msg.offset()
                rec["offset"] = -1001 if off is None else off
            out.write(json.dumps(rec) + "\n")
            out.flush()

        return cb

    pause_at = int(cfg.get("pauseAt") or 0)
    resume_file = cfg.get("resumeFile") or ""
    start = time.monotonic()
    for seq in range(n):
        if pause_at > 0 and seq == pause_at:
            while not os.path.exists(resume_file):
                producer.poll(0.02)  # serves delivery callbacks while paused
            if rate > 0:
                start = time.monotonic() - seq / rate
        if rate > 0:
            due = start + seq / rate
            while True:
                left = due - time.monotonic()
                if left <= 0:
                    break
                producer.poll(left)  # serves delivery callbacks while waiting
        key = f"{prefix}-{seq}"
        kwargs = {
            "key": key.encode(),
            "value": f"value of {prefix}-{seq}".encode(),
            "on_delivery": delivery(seq, key),
        }
        if cfg.get("headers"):
            kwargs["headers"] = [("baton-client", client.encode()), ("baton-seq", str(seq).encode())]
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full: let it drain
                producer.poll(0.1)
        producer.poll(0)
    # Every message ends in a delivery callback, at the latest after
    # message.timeout.ms.
    while producer.flush(1.0) > 0:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
