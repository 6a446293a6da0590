from dracpu.dev.apiserver.server import main

raise SystemExit(main())
