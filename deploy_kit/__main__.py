from deploy_kit.cli.app import main

raise SystemExit(main())
