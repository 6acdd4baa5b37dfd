import sys

try:
    from simllm.cli.main import main
except KeyboardInterrupt:  # Ctrl-C while importing: before main() can report it
    print("simllm: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(main())
