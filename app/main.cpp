// dqt: train, evaluate and run low-bit LLaMA-style language models.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
    CLI::App app{"dqt: train, evaluate and run low-bit LLaMA-style language models"};
    app.require_subcommand(1);
    // A flag given twice takes its last value, as in most Unix tools (scripts append overrides).
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    dqt::cli::add_data_command(app);
    dqt::cli::add_train_command(app);
    dqt::cli::add_eval_command(app);
    dqt::cli::add_generate_command(app);
    dqt::cli::add_export_command(app);
    dqt::cli::add_bench_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        // One line: what was wrong, and where to look.
        std::fprintf(stderr, "dqt: error: %s (see dqt --help)\n", e.what());
        return 2;
    } catch (const dqt::Error& e) {
        std::fprintf(stderr, "dqt: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dqt: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
