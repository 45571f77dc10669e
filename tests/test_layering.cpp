// The folders of src/ depend one way: every `#include "FOLDER/..."` in src/ names the file's own
// folder or one its library lists in USES (CMakeLists.txt's dqt_module lines, which CMake writes
// to DQT_LAYERING_FILE). The include roots of the build already keep most reversed includes
// from compiling; this test names the forbidden edge, and also catches a folder reached only
// through another one's PUBLIC link (data_parallel/ including io/, which its data/ uses).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_helpers.h"

namespace {

using Graph = std::map<std::string, std::set<std::string>>;  // folder -> the folders it may include

// One line per folder: "model: quant kernels core".
Graph read_graph(const std::string& path) {
    std::ifstream file(path);
    Graph graph;
    for (std::string line; std::getline(file, line);) {
        std::istringstream words(line);
        std::string folder;
        if (!(words >> folder) || !folder.ends_with(':')) continue;
        folder.pop_back();
        std::set<std::string>& uses = graph[folder];
        for (std::string used; words >> used;) uses.insert(used);
    }
    return graph;
}

// One line per include against the graph in the files under src/FOLDER/, and per folder of src/
// the graph does not know; sorted.
std::vector<std::string> layering_violations(const std::filesystem::path& src, const Graph& graph) {
    const std::regex include_of_folder(R"(^\s*#\s*include\s*"([^"/]+)/[^"]*")");
    std::vector<std::string> violations;
    for (const auto& folder : std::filesystem::directory_iterator(src)) {
        if (!folder.is_directory()) continue;
        const std::string name = folder.path().filename().string();
        const auto uses = graph.find(name);
        if (uses == graph.end()) {
            violations.push_back("src/" + name + " has no library: declare dqt_module(" + name +
                                 " USES ...) in CMakeLists.txt");
            continue;
        }
        std::string allowed;
        for (const std::string& used : uses->second) allowed += " " + used;
        for (const auto& entry : std::filesystem::recursive_directory_iterator(folder.path())) {
            if (!entry.is_regular_file()) continue;
            std::ifstream file(entry.path());
            int line_number = 0;
            for (std::string line; std::getline(file, line);) {
                ++line_number;
                std::smatch include;
                if (!std::regex_search(line, include, include_of_folder)) continue;
                const std::string used = include[1];
                if (used == name || uses->second.count(used) == 1 || graph.count(used) == 0) continue;
                violations.push_back(std::filesystem::relative(entry.path(), src.parent_path()).string() + ":" +
                                     std::to_string(line_number) + ": " + line + " is the forbidden edge " + name +
                                     " -> " + used + " (" + name + " may use:" + (allowed.empty() ? " nothing" : allowed) +
                                     "; dqt_module(" + name + " ...) in CMakeLists.txt)");
            }
        }
    }
    std::sort(violations.begin(), violations.end());
    return violations;
}

}  // namespace

TEST(Layering, IncludesFollowTheGraph) {
    const Graph graph = read_graph(DQT_LAYERING_FILE);
    ASSERT_EQ(graph.count("core"), 1u) << "cannot read the dependency graph " << DQT_LAYERING_FILE;
    for (const std::string& violation : layering_violations(std::filesystem::path(DQT_SOURCE_DIR) / "src", graph))
        ADD_FAILURE() << violation;
}

TEST(Layering, NamesAReversedIncludeAndAFolderWithoutLibrary) {
    dqt::testing::TempDir dir("layering");
    std::filesystem::create_directories(dir.path / "src/model");
    std::filesystem::create_directories(dir.path / "src/train");
    std::ofstream(dir.path / "src/model/llama.h") << "#pragma once\n#include \"model/config.h\"\n#include \"train/options.h\"\n";
    std::ofstream(dir.path / "src/train/trainer.h") << "#include \"model/llama.h\"\n";
    const Graph graph = {{"model", {}}, {"train", {"model"}}};
    std::filesystem::create_directories(dir.path / "src/serve");
    const std::vector<std::string> expected = {
        "src/model/llama.h:3: #include \"train/options.h\" is the forbidden edge model -> train (model may use: "
        "nothing; dqt_module(model ...) in CMakeLists.txt)",
        "src/serve has no library: declare dqt_module(serve USES ...) in CMakeLists.txt"};
    EXPECT_EQ(layering_violations(dir.path / "src", graph), expected);
}

// docs/ARCHITECTURE.md's reading guide counts its path with scripts/step_path_lines.py, which
// names each definition on the path by the text it starts with: a renamed or re-signed function
// makes the script stop, so the count and the guide are fixed with the code, not found stale.
TEST(Layering, TheReadingGuidesStepPathNamesDefinitionsThatExist) {
    const dqt::testing::CommandResult result =
        dqt::testing::run_command("python3 " + std::string(DQT_SOURCE_DIR) + "/scripts/step_path_lines.py");
    EXPECT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("lines (current)"), std::string::npos) << result.output;
}
