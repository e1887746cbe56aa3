"""Writes a man page (roff, section 1, gzipped) made from a program's --help text.

    man_from_help.py PROGRAM NAME SUMMARY VERSION OUTPUT.1.gz

Option lines (two spaces then '-') become .TP items, with deeper-indented lines continuing them;
'usage:' lines become the SYNOPSIS; other text becomes paragraphs of DESCRIPTION."""
import datetime
import gzip
import os
import re
import subprocess
import sys


def roff(text):
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text.startswith((".", "'")) else text


def main():
    program, name, summary, version, output = sys.argv[1:6]
    help_text = subprocess.run([program, "--help"], capture_output=True, text=True,
                               check=True).stdout.replace(program, name)
    # The page's date: the build's (SOURCE_DATE_EPOCH for reproducible packages).
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0")) or None
    date = (datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc) if epoch
            else datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%d")
    out = [f'.TH {name.upper()} 1 "{date}" "ddprun {version}" "User Commands"', ".SH NAME",
           f"{name} \\- {roff(summary)}"]
    synopsis, description, options = [], [], []
    for line in help_text.splitlines():
        stripped = line.strip()
        if re.match(r"^\s*(usage|Usage):", line) or (synopsis and line.startswith("       ") and
                                                     not options and not description):
            synopsis.append(re.sub(r"^\s*(usage|Usage):\s*", "", line).strip())
        elif re.match(r"^  {1,4}-", line):
            # "  --name, --other ARG   help" or the name alone with its help on the next lines.
            m = re.match(r"^\s+(\S.*?)(?:\s{2,}(\S.*))?$", line)
            options.append([m.group(1), [m.group(2)] if m.group(2) else []])
        elif options and line.startswith("     ") and stripped:
            options[-1][1].append(stripped)
        elif stripped in ("Options:", "OPTIONS:"):
            continue
        elif stripped:
            description.append(stripped)
        elif description and description[-1] != "":
            description.append("")
    if synopsis:
        out.append(".SH SYNOPSIS")
        for s in synopsis:
            out += [".nf", roff(s), ".fi"]
    out.append(".SH DESCRIPTION")
    for d in description:
        out.append(".PP" if d == "" else roff(d))
    if options:
        out.append(".SH OPTIONS")
        for names, words in options:
            out += [".TP", f"\\fB{roff(names)}\\fR", roff(" ".join(words))]
    out += [".SH SEE ALSO", "ddprun(1), ddprund(1), torchrun(1)"]
    # mtime 0: the same bytes for the same help text (reproducible packages).
    with open(output, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0,
                                                filename="") as z:
        z.write(("\n".join(out) + "\n").encode())


if __name__ == "__main__":
    main()
