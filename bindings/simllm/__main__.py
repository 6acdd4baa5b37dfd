from simllm.cli import main

raise SystemExit(main())
