from simllm.cli.main import main

raise SystemExit(main())
