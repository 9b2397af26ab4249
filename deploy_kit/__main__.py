from deploy_kit.cli.app import main

main()
