// dqt: train, evaluate and run low-bit LLaMA-style language models.
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "core/error.h"
#include "data_parallel/comm.h"
#ifdef DQT_WITH_CUDA
#include "cuda/training_device.h"
#endif

namespace {

// One line per failing rank; under mpirun with several ranks, the whole job stops with it
// (the others may be waiting for this rank inside a collective).
int fail(const char* message, int exit_code) {
    std::fprintf(stderr, "dqt: error: %s%s\n", dqt::rank_prefix().c_str(), message);
    if (dqt::world().size() > 1) {
        std::fflush(stderr);
        dqt::Communicator::abort(exit_code);
    }
    dqt::Communicator::finalize();
    return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
    dqt::Communicator::init_from_environment(&argc, &argv);
#ifdef DQT_WITH_CUDA
    dqt::cuda::register_training_device();  // `dqt train --device cuda`
#endif
    CLI::App app{"dqt: train, evaluate and run low-bit LLaMA-style language models"};
    app.require_subcommand(1);
    // A flag given twice takes its last value, as in most Unix tools (scripts append overrides).
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    dqt::cli::add_data_command(app);
    dqt::cli::add_train_command(app);
    dqt::cli::add_eval_command(app);
    dqt::cli::add_generate_command(app);
    dqt::cli::add_serve_command(app);
    dqt::cli::add_export_command(app);
    dqt::cli::add_bench_command(app);
    // CLI11 answers an unknown first word with "A subcommand is required".
    if (argc >= 2 && argv[1][0] != '-') {
        std::string known;
        bool found = false;
        for (const CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) {
            found = found || command->check_name(argv[1]);
            known += (known.empty() ? "" : ", ") + command->get_name();
        }
        if (!found) return fail(("unknown command " + dqt::quote_untrusted(argv[1]) + ": use one of " + known).c_str(), 2);
    }
    // Only training splits its work over ranks; any other command would run N times over.
    if (dqt::world().size() > 1 && (argc < 2 || std::string(argv[1]) != "train")) {
        return fail("only `dqt train` runs on several MPI ranks: start this command without mpirun", 2);
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        dqt::Communicator::finalize();
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        dqt::Communicator::finalize();
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        // One line: what was wrong, and where to look.
        return fail((std::string(e.what()) + " (see dqt --help)").c_str(), 2);
    } catch (const std::exception& e) {
        return fail(e.what(), 1);
    }
    dqt::Communicator::finalize();
    return 0;
}
